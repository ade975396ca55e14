"""The public API: create, look up and use filters.

Data flows one way: callers -> services -> storage -> Redis. Metadata rows
are read from the database and kept per process for ``METADATA_TTL`` seconds.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Mapping
from typing import Any

from django.core.exceptions import ValidationError
from django.core.validators import validate_slug
from django.db import IntegrityError, transaction
from django.utils.module_loading import import_string

from django_bloom import registry as rows
from django_bloom.conf import get_config
from django_bloom.engine import hashers, sizing
from django_bloom.engine.kinds import layout_class, layouts_with
from django_bloom.engine.kinds.base import check_options_shape
from django_bloom.engine.kinds.capabilities import (
    ClusterReady,
    FamilyTemplate,
    Rebuildable,
    ServerChecked,
)
from django_bloom.exceptions import FamilyMisuse, FilterExists, FilterNotFound, FilterUnavailable
from django_bloom.family import Family, FamilyStats
from django_bloom.filter import Filter, redis_answers
from django_bloom.filter_stats import FilterStats
from django_bloom.models import BloomFilter
from django_bloom.registry import forget_filters


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


def get_filter(
    name: str,
    *,
    refresh: bool = False,
    encoder: Callable | None = None,
    member: str | int | None = None,
) -> Filter:
    """The filter called ``name``; raises ``FilterNotFound``.

    A filter family (``create_filter(..., family=True)``) needs ``member`` (a str
    or an int, e.g. ``user.pk``): the handle of that member's filter. A family
    without a member, or a member for a plain filter, raises ``FamilyMisuse``.
    """
    return _select(name, _row_handle(name, refresh, encoder), encoder, member)


async def aget_filter(
    name: str,
    *,
    refresh: bool = False,
    encoder: Callable | None = None,
    member: str | int | None = None,
) -> Filter:
    """``get_filter`` for async code: the same per-process cache; a miss reads the
    row through the async ORM."""
    now = time.monotonic()
    handle = _cached_handle(name, now, refresh, encoder)
    if handle is None:
        try:
            meta = await BloomFilter.objects.aget(name=name)
        except BloomFilter.DoesNotExist:
            raise FilterNotFound(f"no Bloom filter named {name!r}") from None
        handle = _keep_handle(_handle_of(meta), now, encoder)
    return _select(name, handle, encoder, member)


def get_handle(name: str, *, refresh: bool = False) -> Filter | Family:
    """The handle of the row called ``name``, whatever it holds: a ``Filter``, or a
    ``Family`` for a filter family (whole-family ``clear``, ``delete``, ``stats``); raises
    ``FilterNotFound``. For code that acts on rows as rows: the admin's actions, ``bloom``,
    deletion and monitoring."""
    return _row_handle(name, refresh, None)


def get_family(name: str, *, refresh: bool = False) -> Family:
    """The filter family called ``name`` (delete, clear, stats of all its members);
    raises ``FilterNotFound``, or ``FamilyMisuse`` for a plain filter."""
    handle = get_handle(name, refresh=refresh)
    if not isinstance(handle, Family):
        raise FamilyMisuse(f"{name!r} is not a filter family")
    return handle


def _select(
    name: str, handle: Filter | Family, encoder: Callable | None, member: str | int | None
) -> Filter:
    """A row's handle -> the Filter asked for: a family's member, or the filter itself."""
    if isinstance(handle, Family):
        if member is None:
            raise FamilyMisuse(
                f"{name!r} is a filter family: name the member, e.g. "
                f"get_filter({name!r}, member=user.pk) (family-wide operations: "
                f"get_family({name!r}))"
            )
        return handle.member(member, encoder)
    if member is not None:
        raise FamilyMisuse(
            f"{name!r} is not a filter family: it takes no member (create families with "
            "create_filter(..., family=True))"
        )
    if encoder is not None:
        return Filter(handle.meta, encoder)
    return handle


def _handle_of(meta: BloomFilter) -> Filter | Family:
    return Family(meta) if meta.family else Filter(meta)


def _row_handle(name: str, refresh: bool, encoder: Callable | None) -> Filter | Family:
    """The cached handle of a row: a ``Filter``, or a ``Family`` (which caches its members)."""
    now = time.monotonic()
    cached = _cached_handle(name, now, refresh, encoder)
    if cached is not None:
        return cached
    try:
        meta = BloomFilter.objects.get(name=name)
    except BloomFilter.DoesNotExist:
        raise FilterNotFound(f"no Bloom filter named {name!r}") from None
    return _keep_handle(_handle_of(meta), now, encoder)


def _cached_handle(
    name: str, now: float, refresh: bool, encoder: Callable | None
) -> Filter | Family | None:
    if refresh or encoder is not None:
        return None
    return rows._filters.get(name, now, None)


def _keep_handle(handle: Filter | Family, now: float, encoder: Callable | None) -> Filter | Family:
    """Cache a row's handle (not one made for a caller's own encoder)."""
    if encoder is None:
        rows._filters.put(handle.meta.name, handle, now + get_config()["METADATA_TTL"])
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
    family: bool = False,
    member_ttl: int | None = None,
) -> Filter | Family:
    """Create the metadata row and the full-size Redis key, or neither.

    ``layout="blocked"`` (the one-word layout) keeps all of an item's bits in one 64-bit word:
    ``contains`` reads one word instead of k bits (several times less Redis
    work per item) for ~25% more memory at p=0.01 (more at lower p).

    ``options``: the layout's parameters (see its ``validate_options``); the
    one-bit layouts take none.

    ``hasher="blake2b"`` (the default) hashes with keyed BLAKE2b under a random
    per-filter key, so items chosen by an attacker cannot be aimed at bits;
    ``"murmur3"`` is the seed-only MurmurHash3 of filters made before it.

    ``family=True`` makes a filter family (docs/families.md): one row, a filter per
    member (``get_filter(name, member=...)``) of ``capacity``/``error_rate`` each,
    created by its first write; ``member_ttl`` seconds after its last write a member
    expires. Returns the ``Family``; its control key is created instead of a bitmap.
    """
    validate_name(name)
    sizing.validate_sizing(capacity, error_rate)
    if kind not in BloomFilter.Kind.values:
        raise ValueError(f"unknown kind {kind!r}; choose from {', '.join(BloomFilter.Kind.values)}")
    options = layout_class(layout).validate_options(check_options_shape(options or {}))
    validate_family(family, member_ttl, layout, kind, source)
    alias = cache_alias or get_config()["CACHE_ALIAS"]
    validate_alias(alias, layout, family)
    validate_server(layout, alias)
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
        family=family,
        member_ttl=member_ttl,
    )
    meta.derive_geometry()
    rows.fit_layout(meta)  # too big for one Redis string: sharded (MAX_SEGMENT_BYTES)
    validate_binding(meta.layout, meta.is_bound, meta.bound_source)
    if BloomFilter.objects.filter(name=name).exists():
        raise FilterExists(f"a Bloom filter named {name!r} already exists")
    try:
        with transaction.atomic():
            meta.save()
            handle = _handle_of(meta)
            try:
                if isinstance(handle, Family):
                    handle.create_keys()
                else:
                    handle.layout.create(handle.storage, replace=True)
            except BaseException:  # refused part way (a full Redis): no key without its row
                with contextlib.suppress(FilterUnavailable):
                    handle.delete()
                raise
    except IntegrityError:
        raise FilterExists(f"a Bloom filter named {name!r} already exists") from None
    forget_filters(name)
    return handle


def validate_size(layout: str, capacity: int, error_rate: float, options: dict[str, Any]) -> None:
    """ValueError for sizes ``create_filter`` refuses (a geometry that cannot be sized, more
    than ``MAX_FILTER_BYTES``, a segment over one Redis string): for a form. Writes nothing."""
    meta = BloomFilter(capacity=capacity, error_rate=error_rate, layout=layout, options=options)
    meta.derive_geometry()
    rows.fit_layout(meta)


def validate_binding(layout: str, bound: bool, source_text: str) -> None:
    """A bound filter's way back from a lost key is a rebuild from its source: ValueError
    for a layout that cannot be rebuilt (scalable, rotating). Writes nothing."""
    if bound and not issubclass(layout_class(layout), Rebuildable):
        ready = ", ".join(repr(n) for n in layouts_with(Rebuildable))
        raise ValueError(
            f"a {layout!r} filter cannot be bound to {source_text}: it cannot be rebuilt from "
            f"its source after a lost key. Use one of the layouts {ready}."
        )


def validate_alias(alias: str, layout: str, family: bool) -> None:
    """ValueError unless ``alias`` names a cache or a cluster that can hold the layout."""
    from django.conf import settings

    if alias not in settings.CACHES and alias not in get_config()["CLUSTERS"]:
        raise ValueError(
            f"cache alias {alias!r} is not in settings.CACHES (nor a DJANGO_BLOOM['CLUSTERS'] name)"
        )
    if alias in get_config()["CLUSTERS"] and (
        family or not issubclass(layout_class(layout), ClusterReady)
    ):
        ready = ", ".join(layouts_with(ClusterReady))
        raise ValueError(
            f"{alias!r} is a Redis Cluster: its filters may use the layouts {ready} "
            f"(not {'a family' if family else repr(layout)}: its scripts touch keys that a "
            "cluster may place on different nodes, and that is not tested yet)"
        )


def validate_server(layout: str, alias: str) -> None:
    """ValueError when the alias's Redis cannot hold this layout (``native`` without
    RedisBloom); one round trip, only for ``ServerChecked`` kinds."""
    from django.conf import settings

    kind = layout_class(layout)
    if issubclass(kind, ServerChecked) and alias in settings.CACHES:  # unknown: said elsewhere
        from django_bloom.engine.storage import Storage

        kind.check_server(Storage(alias))


def validate_family(family: Any, member_ttl: Any, layout: str, kind: str, source: str) -> None:
    """ValueError/TypeError for family arguments that cannot work; nothing is written."""
    if not isinstance(family, bool):
        raise TypeError("family is True or False")
    if member_ttl is not None:
        if not family:
            raise ValueError("member_ttl is for filter families: pass family=True too")
        if isinstance(member_ttl, bool) or not isinstance(member_ttl, int):
            raise TypeError("member_ttl is a whole number of seconds (or None: no expiry)")
        if not 1 <= member_ttl <= 10 * 366 * 86400:
            raise ValueError("member_ttl is between 1 second and 10 years (or None: no expiry)")
    if not family:
        return
    if not issubclass(layout_class(layout), FamilyTemplate):
        ready = ", ".join(repr(n) for n in layouts_with(FamilyTemplate))
        raise ValueError(f"layout {layout!r} cannot make family members; use one of {ready}")
    if source or kind != BloomFilter.Kind.GENERIC:
        raise ValueError(
            "a filter family is fed by the application (kind 'generic', no source): "
            "a bound source has one filter, not one per member"
        )


__all__ = [
    "Family",
    "FamilyStats",
    "Filter",
    "FilterStats",
    "aget_filter",
    "create_filter",
    "forget_filters",
    "get_family",
    "get_filter",
    "get_handle",
    "redis_answers",
]
