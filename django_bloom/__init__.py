"""django-bloom: Bloom filters for Django, kept in Redis."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

if TYPE_CHECKING:  # pragma: no cover
    from django_bloom.services import Filter, aget_filter, create_filter, get_filter

_LAZY = {"create_filter", "get_filter", "aget_filter", "get_family", "Filter", "FilterStats"}


def __getattr__(name: str) -> Any:
    # Lazy so ``import django_bloom`` works before Django's app registry is ready.
    if name in _LAZY:
        from django_bloom import services

        return getattr(services, name)
    if name == "load_filter":
        from django_bloom.loading import load_filter

        return load_filter
    raise AttributeError(f"module 'django_bloom' has no attribute {name!r}")


__all__ = [
    "create_filter",
    "get_filter",
    "aget_filter",
    "get_family",
    "load_filter",
    "Filter",
    "FilterStats",
    "__version__",
]
