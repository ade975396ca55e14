"""Django settings of ``bench.signup``: ``bench.rebuild_settings`` (PostgreSQL or SQLite
in a file, the cache on the bench's private Redis, ``bench.sourceapp``) with the two
bound fields."""

import os

from bench.rebuild_settings import *  # noqa: F403

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
