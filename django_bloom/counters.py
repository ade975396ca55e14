"""Moved to ``django_bloom.ops.counters``: this path stays (same module object)."""

import sys

from django_bloom.ops import counters as _module

sys.modules[__name__] = _module
