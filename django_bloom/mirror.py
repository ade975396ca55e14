"""Moved to ``django_bloom.engine.mirror``: this path stays (same module object)."""

import sys

from django_bloom.engine import mirror as _module

sys.modules[__name__] = _module
