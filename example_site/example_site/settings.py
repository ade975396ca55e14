"""Example site: SQLite + Redis, the unique validator, the blocklist middleware, the admin."""

import os
from pathlib import Path

BASE_DIR = Path(__file__).resolve().parent.parent
SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY", "example-site-not-secret")
DEBUG = os.environ.get("DJANGO_DEBUG", "1") == "1"
ALLOWED_HOSTS = ["127.0.0.1", "localhost", "[::1]", "testserver"]
USE_TZ = True
# Every date the admin shows (list, detail, chart, projection) is in this zone.
TIME_ZONE = os.environ.get("DJANGO_TIME_ZONE", "UTC")

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django_bloom",
    "accounts",
]
MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django_bloom.middleware.BlocklistMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    # The browser's language (Accept-Language): the admin in Simplified Chinese for zh-CN.
    "django.middleware.locale.LocaleMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]
ROOT_URLCONF = "example_site.urls"
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": os.environ.get("EXAMPLE_DB", str(BASE_DIR / "db.sqlite3")),
    }
}
CACHES = {
    "default": {
        "BACKEND": "django_redis.cache.RedisCache",
        "LOCATION": os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0"),
    }
}
STATIC_URL = "/static/"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
LOGIN_URL = "/admin/login/"

DJANGO_BLOOM = {
    "KEY_PREFIX": os.environ.get("BLOOM_KEY_PREFIX", "bloom-example"),
    "BINDINGS": {
        "usernames": {
            "source": "auth.User.username",
            "normalizer": "username",
            "capacity": 100_000,
            "error_rate": 0.01,
        },
        "emails": {
            "source": "auth.User.email",
            "normalizer": "email_ci",
            "capacity": 100_000,
            "error_rate": 0.01,
        },
    },
    # FireHOL level 1 lists 127.0.0.0/8 and the private ranges: keep the demo reachable.
    "ALLOWLIST": ["127.0.0.0/8", "::1/128"],
    # Trust a local reverse proxy to report the client in X-Forwarded-For.
    "TRUSTED_PROXIES": os.environ.get("BLOOM_TRUSTED_PROXIES", "127.0.0.1/32").split(","),
}
