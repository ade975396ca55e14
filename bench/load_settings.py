"""The example site's settings, switched by bench/load.py through the environment."""

import os

from example_site.settings import *  # noqa: F403
from example_site.settings import DJANGO_BLOOM, MIDDLEWARE

DEBUG = False
if os.environ.get("LOAD_MIDDLEWARE", "1") == "0":
    MIDDLEWARE = [m for m in MIDDLEWARE if not m.endswith("BlocklistMiddleware")]
if os.environ.get("LOAD_MIRROR") == "1":
    DJANGO_BLOOM = {**DJANGO_BLOOM, "MIRROR_FILTERS": ["ip-blocklist"]}
LOGGING = {  # one line per request would cost more than the middleware
    "version": 1,
    "disable_existing_loggers": False,
    "loggers": {"django.server": {"level": "ERROR"}},
}
