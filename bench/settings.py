"""Django settings for the benchmark: SQLite in memory, the cache on the bench Redis."""

import os

SECRET_KEY = "bench"
USE_TZ = True
INSTALLED_APPS = ["django.contrib.contenttypes", "django.contrib.auth", "django_bloom"]
DATABASES = {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}}
CACHES = {
    "default": {
        "BACKEND": "django_redis.cache.RedisCache",
        "LOCATION": os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/0"),
    }
}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
DJANGO_BLOOM = {
    "KEY_PREFIX": os.environ.get("BENCH_PREFIX", "bench"),
    "MIRROR_FILTERS": ["bench-mirror"],
}
