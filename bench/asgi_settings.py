"""A minimal ASGI site for bench/asgi_middleware.py: one async view, the blocklist middleware.

``BENCH_MIDDLEWARE`` picks the stack: ``off`` (no middleware: the anchor),
``thread`` (the middleware's former async path: the whole check in
``sync_to_async(thread_sensitive=True)``, i.e. one shared thread; kept in
bench/asgi_urls.py for the same-run comparison) or ``async`` (today's
``BlocklistMiddleware``: the check awaited on the event loop).
"""

import os

SECRET_KEY = "bench-only"
DEBUG = False
USE_TZ = True
ALLOWED_HOSTS = ["127.0.0.1", "localhost"]
ROOT_URLCONF = "bench.asgi_urls"
INSTALLED_APPS = ["django.contrib.contenttypes", "django.contrib.auth", "django_bloom"]
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": os.environ.get("BENCH_DB", "/tmp/bloom-asgi-bench.sqlite3"),
        "OPTIONS": {"timeout": 30},
    }
}
CACHES = {
    "default": {
        "BACKEND": "django_redis.cache.RedisCache",
        "LOCATION": os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0"),
    }
}
TEMPLATES = [{"BACKEND": "django.template.backends.django.DjangoTemplates", "APP_DIRS": True}]
_MIDDLEWARE = {
    "off": [],
    "thread": ["bench.asgi_urls.ThreadedBlocklistMiddleware"],
    "async": ["django_bloom.middleware.BlocklistMiddleware"],
}
MIDDLEWARE = _MIDDLEWARE[os.environ.get("BENCH_MIDDLEWARE", "async")]
DJANGO_BLOOM = {
    "KEY_PREFIX": os.environ.get("BLOOM_KEY_PREFIX", "bloom-asgi-bench"),
    "TRUSTED_PROXIES": ["127.0.0.1/32"],
    # A busy machine answers slowly: time it, never fail open (FAIL_OPEN lets a blocked
    # address through when a reply takes longer than the default 0.2 s).
    "SOCKET_TIMEOUT": 5.0,
    "CONNECT_TIMEOUT": 5.0,
}
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "loggers": {"django_bloom": {"level": "ERROR"}, "django.request": {"level": "CRITICAL"}},
}
