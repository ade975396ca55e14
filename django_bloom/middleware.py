"""Moved to ``django_bloom.ipblock.middleware``: this path stays (same module object)."""

import sys

from django_bloom.ipblock import middleware as _module

sys.modules[__name__] = _module
