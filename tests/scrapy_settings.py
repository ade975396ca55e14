"""Django settings of the crawler processes in tests/jobs/test_scrapy_dupefilter.py.

The test suite's settings, with a database file the crawlers share (the suite's
own database is in memory), the test's key prefix and, if BLOOM_SCRAPY_REDIS names
one, the test's private redis-server.
"""

import os

from tests.settings import *  # noqa: F403

DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": os.environ["BLOOM_SCRAPY_DB"],
        "OPTIONS": {"timeout": 30},
    }
}
DJANGO_BLOOM = {"KEY_PREFIX": os.environ["BLOOM_KEY_PREFIX"]}
if os.environ.get("BLOOM_SCRAPY_REDIS"):  # a test's private redis-server
    REDIS_URL = os.environ["BLOOM_SCRAPY_REDIS"]
    CACHES["default"] = {**CACHES["default"], "LOCATION": REDIS_URL}  # noqa: F405
