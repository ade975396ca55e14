"""Django settings of ``bench.rebuild_source`` (set by its environment variables):
SQLite in a file or PostgreSQL, the cache on the bench's private Redis."""

import json
import os

SECRET_KEY = "bench"
USE_TZ = True
INSTALLED_APPS = [
    "django.contrib.contenttypes",
    "django.contrib.auth",
    "django_bloom",
    "bench.sourceapp",
]
if os.environ.get("BENCH_DB") == "postgresql":
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": os.environ["BENCH_PG_NAME"],
            "USER": os.environ.get("PGUSER", "postgres"),
            "PASSWORD": os.environ.get("PGPASSWORD", ""),
            "HOST": os.environ.get("PGHOST", "127.0.0.1"),
            "PORT": os.environ.get("PGPORT", "5432"),
        }
    }
else:
    DATABASES = {
        "default": {"ENGINE": "django.db.backends.sqlite3", "NAME": os.environ["BENCH_SQLITE"]}
    }
CACHES = {
    "default": {
        "BACKEND": "django_redis.cache.RedisCache",
        "LOCATION": os.environ["BENCH_REDIS_URL"],
    }
}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
DJANGO_BLOOM = {
    "BINDINGS": json.loads(os.environ.get("BENCH_BINDINGS", "{}")),
}
