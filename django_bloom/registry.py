"""What a filter row fixes, below the Filter handle: its layout and key names, its
fingerprint and hasher, size limits, the per-process handle cache (an ``Expiring``, the
package's one per-process cache with a TTL)."""

from __future__ import annotations

import secrets

from django_bloom.conf import forget_on_change, get_config
from django_bloom.engine import format as fmt
from django_bloom.engine import hashers
from django_bloom.engine.kinds import Layout, Segment, layout_class
from django_bloom.engine.kinds.base import RowParams
from django_bloom.engine.kinds.capabilities import Splittable
from django_bloom.engine.kinds.family import layout as family
from django_bloom.exceptions import (
    FilterIsBound,
)
from django_bloom.expiring import Expiring
from django_bloom.models import BloomFilter


def fingerprint(meta: BloomFilter) -> int:
    """Non-zero u32 naming one filter layout; stored in the key's trailer."""
    return fmt.fingerprint(
        meta.format_version,
        meta.num_bits,
        meta.num_hashes,
        meta.seed,
        meta.layout,
        hasher_of(meta).fingerprint_part(),  # nothing for murmur3 rows
    )


def hasher_of(meta: BloomFilter) -> hashers.Hasher:
    return hashers.identify_hasher(meta.hasher, meta.seed)


MAX_KEY_BYTES = 512 * 1024 * 1024  # Redis's largest string (proto-max-bulk-len default)


def max_segment_bytes() -> int:
    """The largest bitmap one Redis string holds here (``MAX_SEGMENT_BYTES``, at most
    what Redis allows: 512 MiB with the trailer)."""
    return min(get_config()["MAX_SEGMENT_BYTES"], MAX_KEY_BYTES - fmt.TRAILER_BYTES)


def largest_segment_bits(meta: BloomFilter) -> int:
    """Bits the row's largest Redis string holds (a sharded filter splits its bits, a
    counting filter holds 4 per position)."""
    return max(s.num_bits for s in layout_for(meta).segments)


def refuse_total(meta: BloomFilter, needed: int) -> None:
    """ValueError when ``needed`` bytes of keys are more than ``MAX_FILTER_BYTES``."""
    limit = get_config()["MAX_FILTER_BYTES"]
    if needed > limit:
        raise ValueError(
            f"filter {meta.name!r} would hold {needed:,} bytes in Redis, more than "
            f"MAX_FILTER_BYTES allows ({limit:,} bytes): "
            "lower the capacity or raise the error rate (or raise DJANGO_BLOOM"
            "['MAX_FILTER_BYTES'] for a filter meant to be that large)"
        )


def check_size(meta: BloomFilter) -> None:
    """Refuse sizes one Redis string cannot hold, before writing: the filter's largest
    segment; then the whole filter's (``MAX_FILTER_BYTES``)."""
    layout = layout_for(meta)
    bits = max(s.num_bits for s in layout.segments)
    needed = (bits + 7) // 8
    limit = max_segment_bytes()
    if needed > limit:
        raise ValueError(
            f"a filter segment of {bits:,} bits needs {needed / 2**20:,.0f} MiB, more than one "
            f"Redis string may hold here (MAX_SEGMENT_BYTES, {limit / 2**20:,.0f} MiB): lower "
            "the capacity or raise the error rate, or use layout 'sharded' with more segments"
        )
    refuse_total(meta, layout.key_bytes)


def fit_layout(meta: BloomFilter) -> None:
    """A new filter too big for one segment becomes what its layout says (``oversize``:
    the standard layout turns ``sharded``); then its size is checked."""
    refuse_total(meta, (meta.num_bits + 7) // 8)  # before segments are counted or bound
    limit = max_segment_bytes()
    kind = layout_class(meta.layout)
    if (largest_segment_bits(meta) + 7) // 8 > limit and issubclass(kind, Splittable):
        bigger = kind.oversize(meta.num_bits, limit)
        if bigger is not None:
            meta.layout, meta.options = bigger[0], dict(bigger[1])
    check_size(meta)


def new_generation() -> str:
    """A fresh token for a filter's bits key name (see ``Layout.keys``)."""
    return secrets.token_hex(4)


def refuse_clear(meta: BloomFilter) -> None:
    """A bound filter is never emptied: its source still has the rows (FilterIsBound)."""
    if meta.is_bound:
        raise FilterIsBound(
            f"filter {meta.name!r} is bound to {meta.bound_source}: emptying it would make every "
            "existing row read as absent (taken values accepted, blocked addresses let through). "
            f"Rebuild it from its source instead: manage.py bloom rebuild {meta.name} "
            "(replaces its content atomically)."
        )


def geometry_of(meta: BloomFilter) -> tuple[int, int, str]:
    """What a rebuild compares: another geometry gets another key name."""
    return (meta.num_bits, meta.num_hashes, meta.layout)


def layout_for(meta: BloomFilter, member: str | int | None = None) -> Layout:
    """The row's layout class bound to its geometry and key names; with ``member``
    (a family row), that member's layout (``engine.family.MemberLayout``)."""
    segment = Segment(
        name=meta.name,
        alias=meta.cache_alias,
        prefix=get_config()["KEY_PREFIX"],
        num_bits=meta.num_bits,
        num_hashes=meta.num_hashes,
        fingerprint=fingerprint(meta),
        generation=meta.generation,
    )
    row = RowParams(meta.options or {}, meta.capacity, meta.error_rate)
    layout = layout_class(meta.layout).bind(segment, row)
    if member is None:
        return layout
    return family.MemberLayout.of(
        layout,
        family.member_token(member),
        family.control_key(segment.prefix, meta.name),
        meta.member_ttl,
    )


# -- per-process caches ------------------------------------------------------------
_filters = Expiring()  # the handles of services.get_filter: name -> Filter or Family


@forget_on_change
def forget_filters(name: str | None = None) -> None:
    """Drop cached metadata (all of it, or one filter's)."""
    if name is None:
        _filters.clear()
    else:
        _filters.pop(name)
