"""Moved to ``django_bloom.unique.normalizers``: this path stays (same module object)."""

import sys

from django_bloom.unique import normalizers as _module

sys.modules[__name__] = _module
