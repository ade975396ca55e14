"""Moved to ``django_bloom.unique.sync``: this path stays (same module object)."""

import sys

from django_bloom.unique import sync as _module

sys.modules[__name__] = _module
