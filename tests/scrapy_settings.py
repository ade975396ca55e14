"""Django settings of the crawler processes in tests/test_scrapy_dupefilter.py.

The test suite's settings, with a database file the crawlers share (the suite's
own database is in memory) and the test's key prefix.
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
