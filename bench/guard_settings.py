"""bench.load_settings, with the profile view's guard off when GUARD_OFF=1."""

import os

from bench.load_settings import *  # noqa: F403

if os.environ.get("GUARD_OFF") == "1":
    ROOT_URLCONF = "bench.guard_urls"
