"""The unique-field feature: the validator, binding a filter to a model field.

The normalisers moved down to the handles floor (``django_bloom/normalizers.py``: a handle
applies its row's); ``django_bloom.unique.normalizers`` stays importable (and a dotted path
to one of them, as settings name it), as the same module."""

import sys

from django_bloom import normalizers

sys.modules[f"{__name__}.normalizers"] = normalizers
