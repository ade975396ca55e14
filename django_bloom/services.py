"""The public API: create, look up and use filters.

Data flows one way: callers -> services -> storage -> Redis. Metadata rows
are read from the database and kept per process for ``METADATA_TTL`` seconds.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from django.core.exceptions import ValidationError
from django.core.validators import validate_slug
from django.db import IntegrityError, transaction
from django.utils.module_loading import import_string

from django_bloom import rows
from django_bloom.conf import get_config
from django_bloom.engine import hashers, hashing
from django_bloom.engine.layouts import layout_class, layout_names
from django_bloom.exceptions import (  # noqa: F401  (BloomError: re-exported, as before)
    BloomError,
    FilterExists,
    FilterKeyMissing,
    FilterNotFound,
)
from django_bloom.filter import Filter, FilterStats, redis_answers
from django_bloom.models import BloomFilter
from django_bloom.rows import (  # re-exported: they lived here before
    _added_key,
    flush_added,
    forget_filters,
    hasher_of,
    layout_for,
    refuse_clear,
)


def validate_name(name: Any) -> str:
    if not isinstance(name, str) or not name:
        raise ValueError("a filter name must be a non-empty string")
    try:
        validate_slug(name)
    except ValidationError:
        raise ValueError(
            f"invalid filter name {name!r}: use letters, digits, '-' and '_' only "
            "(no spaces, braces or colons: the name is part of Redis keys)"
        ) from None
    if len(name) > 100:
        raise ValueError("a filter name is at most 100 characters")
    return name


def encoder_path(encoder: Callable | str | None) -> str:
    """Dotted path for an encoder, checked importable so get_filter can load it."""
    if encoder is None or encoder == "":
        return ""
    path = encoder if isinstance(encoder, str) else f"{encoder.__module__}.{encoder.__qualname__}"
    try:
        found = import_string(path)
    except ImportError:
        raise ValueError(
            f"encoder {path!r} is not importable: pass a module-level function or its dotted path"
        ) from None
    if not callable(found) or (not isinstance(encoder, str) and found is not encoder):
        raise ValueError(f"encoder {path!r} does not name the callable given")
    return path


def get_filter(name: str, *, refresh: bool = False, encoder: Callable | None = None) -> Filter:
    """The filter called ``name``; raises ``FilterNotFound``."""
    now = time.monotonic()
    if not refresh and encoder is None:
        cached = rows._filters.get(name)
        if cached and cached[0] > now:
            return cached[1]
    try:
        meta = BloomFilter.objects.get(name=name)
    except BloomFilter.DoesNotExist:
        raise FilterNotFound(f"no Bloom filter named {name!r}") from None
    handle = Filter(meta, encoder)
    if encoder is None:
        with rows._lock:
            rows._filters[name] = (now + get_config()["METADATA_TTL"], handle)
    return handle


def create_filter(
    name: str,
    *,
    capacity: int,
    error_rate: float = 0.01,
    description: str = "",
    kind: str = BloomFilter.Kind.GENERIC,
    cache_alias: str | None = None,
    source: str = "",
    normalizer: str = "",
    encoder: Callable | str | None = None,
    layout: str = BloomFilter.Layout.STANDARD,
    hasher: str = hashers.DEFAULT,
    options: Mapping[str, Any] | None = None,
) -> Filter:
    """Create the metadata row and the full-size Redis key, or neither.

    ``layout="blocked"`` (the one-word layout) keeps all of an item's bits in one 64-bit word:
    ``contains`` reads one word instead of k bits (several times less Redis
    work per item) for ~25% more memory at p=0.01 (more at lower p).

    ``options``: the layout's parameters (see its ``validate_options``); the
    one-bit layouts take none.

    ``hasher="blake2b"`` (the default) hashes with keyed BLAKE2b under a random
    per-filter key, so items chosen by an attacker cannot be aimed at bits;
    ``"murmur3"`` is the seed-only MurmurHash3 of filters made before it.
    """
    validate_name(name)
    hashing.validate_sizing(capacity, error_rate)
    if kind not in BloomFilter.Kind.values:
        raise ValueError(f"unknown kind {kind!r}; choose from {', '.join(BloomFilter.Kind.values)}")
    if layout not in layout_names():
        raise ValueError(f"unknown layout {layout!r}; choose from {', '.join(layout_names())}")
    options = layout_class(layout).validate_options(dict(options or {}))
    alias = cache_alias or get_config()["CACHE_ALIAS"]
    from django.conf import settings

    if alias not in settings.CACHES and alias not in get_config()["CLUSTERS"]:
        raise ValueError(
            f"cache alias {alias!r} is not in settings.CACHES (nor a DJANGO_BLOOM['CLUSTERS'] name)"
        )
    meta = BloomFilter(
        name=name,
        description=description,
        kind=kind,
        capacity=capacity,
        error_rate=error_rate,
        cache_alias=alias,
        source=source,
        normalizer=normalizer,
        encoder=encoder_path(encoder),
        layout=layout,
        options=options,
        hasher=hashers.new_hasher_value(hasher),
        generation=rows.new_generation(),
    )
    meta.derive_geometry()
    rows.fit_layout(meta)  # too big for one Redis string: sharded (MAX_SEGMENT_BYTES)
    if BloomFilter.objects.filter(name=name).exists():
        raise FilterExists(f"a Bloom filter named {name!r} already exists")
    try:
        with transaction.atomic():
            meta.save()
            handle = Filter(meta)
            handle.layout.create(handle.storage, replace=True)
    except IntegrityError:
        raise FilterExists(f"a Bloom filter named {name!r} already exists") from None
    forget_filters(name)
    return handle


__all__ = [
    "FilterStats",
    "_added_key",
    "flush_added",
    "hasher_of",
    "layout_for",
    "redis_answers",
    "refuse_clear",
    "Filter",
    "FilterStats",
    "FilterKeyMissing",
    "create_filter",
    "get_filter",
    "forget_filters",
]
