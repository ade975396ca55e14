"""Moved to ``django_bloom.engine.hashing``: this path stays (same module object)."""

import sys

from django_bloom.engine import hashing as _module

sys.modules[__name__] = _module
