"""bench.settings with a database file (bench/scrapy_dupefilter.py): the dupefilter's worker
thread and the counters' flusher have their own connections, which an in-memory SQLite
database would give an empty schema."""

import os

from bench.settings import *  # noqa: F403

DATABASES = {
    "default": {"ENGINE": "django.db.backends.sqlite3", "NAME": os.environ["BENCH_SCRAPY_DB"]}
}
