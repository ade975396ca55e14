"""Django settings of ``bench.signup`` (set by its environment variables): PostgreSQL or
SQLite in a file, the cache on the bench's private Redis, the two bound fields."""

import os

from bench.rebuild_settings import CACHES, DATABASES  # noqa: F401

SECRET_KEY = "bench"
USE_TZ = True
INSTALLED_APPS = [
    "django.contrib.contenttypes",
    "django.contrib.auth",
    "django_bloom",
    "bench.sourceapp",
]
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
CAPACITY = int(os.environ.get("BENCH_CAPACITY", "1000000"))
DJANGO_BLOOM = {
    "KEY_PREFIX": "bench-signup",
    "BINDINGS": {
        "bench-usernames": {"source": "auth.User.username", "normalizer": "username",
                            "capacity": CAPACITY, "error_rate": 0.01},
        "bench-accounts": {"source": "sourceapp.Account.email", "normalizer": "email_ci",
                           "capacity": CAPACITY, "error_rate": 0.01},
    },
}  # fmt: skip
