"""Moved to ``django_bloom.ipblock.ip``: this path stays (same module object)."""

import sys

from django_bloom.ipblock import ip as _module

sys.modules[__name__] = _module
