"""Moved to ``django_bloom.ops.verify``: this path stays (same module object)."""

import sys

from django_bloom.ops import verify as _module

sys.modules[__name__] = _module
