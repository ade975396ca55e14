"""Moved to ``django_bloom.unique.validators``: this path stays (same module object)."""

import sys

from django_bloom.unique import validators as _module

sys.modules[__name__] = _module
