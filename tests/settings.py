import os

SECRET_KEY = "tests-only"
DEBUG = False
USE_TZ = True
ROOT_URLCONF = "tests.urls"
INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django_bloom",
    "tests.testapp",
]
MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]
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
# BLOOM_TEST_DB=postgresql runs the suite on PostgreSQL (scripts/matrix.sh postgres);
# the connection comes from the usual PG* variables. A pytest run inside the suite
# (tests/contract/test_a_new_kind.py) names a test database of its own in BLOOM_TEST_DB_NAME:
# the default name is the outer run's, which the inner one would otherwise drop or fail on.
if os.environ.get("BLOOM_TEST_DB") == "postgresql":
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": os.environ.get("PGDATABASE", "postgres"),
            "USER": os.environ.get("PGUSER", "postgres"),
            "PASSWORD": os.environ.get("PGPASSWORD", ""),
            "HOST": os.environ.get("PGHOST", "127.0.0.1"),
            "PORT": os.environ.get("PGPORT", "5432"),
            "TEST": {"NAME": os.environ.get("BLOOM_TEST_DB_NAME")},
        }
    }
else:
    DATABASES = {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}}
# A pytest-xdist worker (gw0, gw1, ...) takes a Redis of its own from BLOOM_WORKER_REDIS_URLS
# (scripts/with-redis.sh starts them for make test TEST_WORKERS=N): one worker's heavy commands
# must not stall the other's reads. REDIS_URL is set for the processes a test starts too.
_worker = os.environ.get("PYTEST_XDIST_WORKER", "")
if _worker and os.environ.get("BLOOM_WORKER_REDIS_URLS"):
    _urls = os.environ["BLOOM_WORKER_REDIS_URLS"].split()
    _index = int(_worker.removeprefix("gw"))
    if _index >= len(_urls):
        raise RuntimeError(f"worker {_worker}: BLOOM_WORKER_REDIS_URLS has {len(_urls)} Redis URLs")
    os.environ["REDIS_URL"] = _urls[_index]
REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
CACHES = {
    "default": {
        "BACKEND": "django_redis.cache.RedisCache",
        "LOCATION": REDIS_URL,
        "OPTIONS": {"CLIENT_CLASS": "django_redis.client.DefaultClient"},
    },
    # Deliberately dead: failure-mode tests point filters here.
    "dead": {
        "BACKEND": "django_redis.cache.RedisCache",
        "LOCATION": "redis://127.0.0.1:56379/0",
        "OPTIONS": {"SOCKET_CONNECT_TIMEOUT": 0.2, "SOCKET_TIMEOUT": 0.2},
    },
    "locmem": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"},
    # Django's own Redis backend (4.0+) on the shared server: test_django_cache_backend.py.
    "djredis": {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": REDIS_URL},
}
STATIC_URL = "/static/"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
