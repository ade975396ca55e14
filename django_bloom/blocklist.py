"""Moved to ``django_bloom.ipblock.service``: this path stays (same module object)."""

import sys

from django_bloom.ipblock import service as _module

sys.modules[__name__] = _module
