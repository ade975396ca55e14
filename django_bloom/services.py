"""The public API: create, look up and use filters.

Data flows one way: callers -> services -> storage -> Redis. Metadata rows
are read from the database and kept per process for ``METADATA_TTL`` seconds.
"""

from __future__ import annotations

import logging
import math
import secrets
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from django.core.exceptions import ValidationError
from django.core.validators import validate_slug
from django.db import DatabaseError, IntegrityError, transaction
from django.utils import timezone
from django.utils.module_loading import import_string

from django_bloom.conf import forget_on_change, get_config
from django_bloom.engine import format as fmt
from django_bloom.engine import hashers, hashing
from django_bloom.engine.layouts import Layout, Segment, layout_class, layout_names
from django_bloom.engine.mirror import mirror_for
from django_bloom.engine.storage import Storage
from django_bloom.exceptions import (
    BloomError,
    FilterExists,
    FilterIsBound,
    FilterKeyMissing,
    FilterNotFound,
)
from django_bloom.models import BloomFilter
from django_bloom.ops import counters

_UNSET = object()

logger = logging.getLogger("django_bloom.services")


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


def check_size(num_bits: int) -> None:
    """A filter is one Redis string: refuse sizes Redis cannot hold, before writing."""
    needed = (num_bits + 7) // 8 + fmt.TRAILER_BYTES
    if needed > MAX_KEY_BYTES:
        raise ValueError(
            f"a filter of {num_bits:,} bits needs {needed / 2**20:,.0f} MiB, more than one Redis "
            f"string can hold ({MAX_KEY_BYTES // 2**20} MiB): lower the capacity or raise the "
            "error rate, or split the data over several filters"
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


@dataclass(frozen=True)
class FilterStats:
    name: str
    capacity: int
    error_rate: float
    num_bits: int
    num_hashes: int
    bits_set: int
    fill_ratio: float
    estimated_items: float
    current_fpr: float
    capacity_used: float
    memory_bytes: int | None
    key_bytes: int
    items_added: int

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        if math.isinf(data["estimated_items"]):
            data["estimated_items"] = None
        return data


class _Bound:
    """What one row's geometry fixes for the hot path: the row, its key layout,
    its position function and its local mirror. A handle swaps the whole object
    when it refreshes, and each operation reads it once, so no thread ever sends
    one geometry's positions to another geometry's key."""

    __slots__ = ("meta", "layout", "positions", "local")

    def __init__(self, meta: BloomFilter):
        self.meta = meta
        self.layout = layout_for(meta)
        self.positions = self.layout.positioner()
        self.local: Any = _UNSET  # the mirror, resolved on first read


def new_generation() -> str:
    """A fresh token for a filter's bits key name (see ``Layout.keys``)."""
    return secrets.token_hex(4)


class Filter:
    """A handle on one Bloom filter. Cheap; get one with ``get_filter(name)``.

    A handle whose key is gone because the filter was resized (rebuilt with
    another geometry) in the meantime re-reads its row and retries once, so a
    long-lived handle heals; see ``_refresh``.
    """

    def __init__(self, meta: BloomFilter, encoder: Callable | None = None):
        self.storage = Storage(meta.cache_alias)
        self.encoder = encoder or (import_string(meta.encoder) if meta.encoder else None)
        self.hasher = hasher_of(meta)  # the row's scheme and key: fixed for its lifetime
        self._bind(meta)

    def _bind(self, meta: BloomFilter) -> None:
        self._bound = _Bound(meta)  # first: the hot path reads only this
        self.meta = meta
        self.name = meta.name
        self.layout = self._bound.layout

    def __repr__(self) -> str:
        m = self.meta
        return (
            f"<Filter {m.name!r} n={m.capacity} p={m.error_rate} m={m.num_bits} k={m.num_hashes}>"
        )

    # -- what the rest of the package asks (it never reaches into storage or layout) ---
    @property
    def identity(self) -> tuple[str, str]:
        """(live bits key, cache alias): names this filter's current key across handles."""
        return (self._bound.layout.keys.bits, self.storage.alias)

    @property
    def counters_key(self) -> str:
        """The Redis key of the validator counters (``counters.py``)."""
        return self._bound.layout.keys.counters

    @property
    def key_bytes(self) -> int:
        """Bytes the filter's Redis key(s) hold: bitmap and trailer."""
        return self._bound.layout.key_length

    def validate_items(self, items: Iterable[Any]) -> None:
        """Raise TypeError/ValueError as ``add`` would for a bad item; writes nothing."""
        self.hasher.item_digests(items, self.encoder)

    def rebuild_running(self) -> bool:
        """Whether a rebuild holds this filter's build lock now."""
        return self.storage.build_running(self._bound.layout.segment)

    def incr_counters(self, deltas: dict[str, int]) -> None:
        self.storage.incr_counters(self._bound.layout.segment, deltas)

    def stored_counters(self) -> dict[str, int]:
        return self.storage.read_counters(self._bound.layout.segment)

    def reset_counters(self) -> None:
        self.storage.reset_counters(self._bound.layout.segment)

    # -- hashing ------------------------------------------------------------
    def hashes(self, items: Iterable[Any]) -> list[tuple[int, int]]:
        """(h1, h2) per item. Validates every item before anything is sent."""
        return hashing.pairs_of(self.hasher.item_digests(items, self.encoder))

    def positions(self, pairs: Sequence[tuple[int, int]]) -> list[int]:
        return self._bound.layout.positions_of_pairs(pairs)

    def _digest(self, item: Any) -> bytes:
        return self.hasher.digest(hashing.item_bytes(item, self.encoder))

    def _digest_one(self, item: Any, bound: _Bound | None = None) -> tuple[bytes, list[int]]:
        digest = self._digest(item)
        return digest, (bound or self._bound).positions(*hashing.PAIR.unpack(digest))

    def _digest_many(self, items: Iterable[Any], bound: _Bound) -> tuple[bytes, Sequence[int]]:
        """Digests and the flat positions of a batch (a numpy array when numpy is installed)."""
        digests = self.hasher.item_digests(list(items), self.encoder)
        return digests, bound.layout.positions(digests)

    # -- queries --------------------------------------------------------------
    def contains(self, item: Any) -> bool:
        """False means certainly never added. True means maybe added."""
        return self._retrying(self._contains, item)

    __contains__ = contains

    def _contains(self, item: Any, bound: _Bound) -> bool:
        local = self._mirror(bound)
        if local is not None:
            return local.probe(*hashing.PAIR.unpack(self._digest(item)))
        _digest, flat = self._digest_one(item, bound)
        return bound.layout.contains(self.storage, flat)[0]

    def contains_many(self, items: Iterable[Any]) -> list[bool]:
        items = items if isinstance(items, (list, tuple)) else list(items)
        return self._retrying(self._contains_many, items)

    def _contains_many(self, items: Sequence[Any], bound: _Bound) -> list[bool]:
        digests, flat = self._digest_many(items, bound)
        if not digests:
            return []
        local = self._mirror(bound)
        if local is not None:
            return local.test(flat, bound.meta.num_hashes)
        return bound.layout.contains(self.storage, flat)

    def _mirror(self, bound: _Bound | None = None):
        """This filter's local mirror, if opted in (resolved once per geometry)."""
        bound = bound or self._bound
        if bound.local is _UNSET:
            bound.local = mirror_for(self, bound.layout)
        return bound.local

    def _retrying(self, operation: Callable[[Any, _Bound], Any], arg: Any) -> Any:
        """Run ``operation`` on this handle's geometry; on FilterKeyMissing, once
        more if the row has moved on (``_refresh``). Costs nothing when nothing fails."""
        try:
            return operation(arg, self._bound)
        except FilterKeyMissing:
            if not self._refresh():
                raise
        return operation(arg, self._bound)

    def _refresh(self) -> bool:
        """After FilterKeyMissing: re-read the row (not the cache). If it names
        another key or geometry (a resize, or a rebuild that replaced the key),
        re-bind this handle to it and say so: the caller retries once.
        Otherwise the key is really missing: False, and the caller re-raises."""
        try:
            meta = BloomFilter.objects.get(pk=self.meta.pk)
        except (BloomFilter.DoesNotExist, DatabaseError):
            return False
        if layout_for(meta) == self._bound.layout:
            return False
        self._bind(meta)
        forget_filters(self.name)
        return True

    # -- writes -------------------------------------------------------------
    def add(self, item: Any) -> bool:
        """Add one item; True iff it was not (maybe) present before. Atomic."""
        return self._retrying(self._add, item)

    def _add(self, item: Any, bound: _Bound) -> bool:
        return self._write(bound, *self._digest_one(item, bound))[0]

    def add_many(self, items: Iterable[Any]) -> list[bool]:
        items = items if isinstance(items, (list, tuple)) else list(items)
        return self._retrying(self._add_many, items)

    def _add_many(self, items: Sequence[Any], bound: _Bound) -> list[bool]:
        digests, flat = self._digest_many(items, bound)
        if not digests:
            return []
        return self._write(bound, digests, flat)

    def _write(self, bound: _Bound, digests: bytes, flat: Sequence[int]) -> list[bool]:
        result = bound.layout.add(self.storage, flat)
        local = self._mirror(bound)
        if local is not None:
            local.apply(flat)
        if result.rebuilding:
            self._journal(bound, digests)
        new = result.was_new.count(True)
        if new:
            _count_added(bound.meta, new)
        return result.was_new

    def _journal(self, bound: _Bound, digests: bytes) -> None:
        """A rebuild is filling a fresh key: make sure it gets these items too."""
        pairs = hashing.pairs_of(digests)
        if self.storage.journal(bound.layout.segment, fmt.pack_journal(pairs)):
            return
        # The rebuild finished between our write and the journal: write again
        # into the new live key (its layout may have changed).
        fresh = get_filter(self.name, refresh=True, encoder=self.encoder)
        fresh.layout.add(fresh.storage, fresh.positions(pairs))

    def clear(self) -> None:
        """Empty the filter (the key is recreated at full size).

        A bound filter (a ``source``, or a blocklist fed by BlockedEntry rows)
        is never emptied: raises ``FilterIsBound``; rebuild it instead.
        """
        current = BloomFilter.objects.get(pk=self.meta.pk)  # the live key, not a stale handle's
        refuse_clear(current)
        self.storage.clear(layout_for(current).segment)
        BloomFilter.objects.filter(pk=self.meta.pk).update(items_added=0)

    def delete(self) -> None:
        """Delete the Redis keys (bits keys of every generation) and the metadata row."""
        self.storage.delete(self.layout.segment)
        BloomFilter.objects.filter(pk=self.meta.pk).delete()
        forget_filters(self.name)

    # -- monitoring ---------------------------------------------------------
    def stats(self) -> FilterStats:
        meta = self.meta
        bits = self.storage.count_bits(self.layout.segment, get_config()["STATS_CHUNK_BYTES"])
        estimated = self.layout.estimate_items(bits)
        flush_added(meta)
        added = BloomFilter.objects.filter(pk=meta.pk).values_list("items_added", flat=True)
        pending = counters.pending_added(_added_key(meta))  # a flush that could not write yet
        return FilterStats(
            name=meta.name,
            capacity=meta.capacity,
            error_rate=meta.error_rate,
            num_bits=meta.num_bits,
            num_hashes=meta.num_hashes,
            bits_set=bits,
            fill_ratio=bits / meta.num_bits,
            estimated_items=estimated,
            current_fpr=self.layout.fill_fpr(bits),
            capacity_used=estimated / meta.capacity,
            memory_bytes=self.storage.memory_usage(self.layout.segment),
            key_bytes=self.layout.key_length,
            items_added=next(iter(added), 0) + pending,
        )

    # -- rebuild ------------------------------------------------------------
    def rebuild(
        self,
        items: Iterable[Any],
        *,
        capacity: int | None = None,
        error_rate: float | None = None,
        progress: Callable[[int], None] | None = None,
    ) -> int:
        """Replace the filter's content with ``items``; optionally resize.

        The new bitmap is built in this process and uploaded to a separate key,
        then swapped in with RENAME, so readers never see a half-built filter.
        Items added while it runs are journaled by the writers and replayed
        into the new key before the swap. Returns the number of items read.
        """
        capacity = self.meta.capacity if capacity is None else capacity
        error_rate = self.meta.error_rate if error_rate is None else error_rate
        hashing.validate_sizing(capacity, error_rate)
        new_meta = BloomFilter.objects.get(pk=self.meta.pk)
        live = layout_for(new_meta)  # the row's key now, whatever this handle holds
        old_geometry = _geometry(new_meta)
        new_meta.capacity, new_meta.error_rate = capacity, error_rate
        new_meta.derive_geometry()
        check_size(new_meta.num_bits)
        if _geometry(new_meta) != old_geometry:
            # Another geometry gets another key name: handles that still hold
            # the old geometry then miss (FilterKeyMissing, and they refresh)
            # instead of setting bits at the old positions in the new bitmap.
            new_meta.generation = new_generation()
        new_layout = layout_for(new_meta)
        token = uuid.uuid4().hex
        if not self.storage.begin_build(live.segment, token):
            raise BloomError(f"a rebuild of {self.name!r} is already running")
        try:
            count = self._build(new_meta, new_layout, items, progress)
            drained = 0
            while True:
                entries = self.storage.read_journal(live.segment, drained)
                if entries:
                    pairs = fmt.unpack_journal(entries)
                    flat = new_layout.positions_of_pairs(pairs)
                    self.storage.set_build_bits(new_layout.segment, flat)
                    drained += len(entries)
                outcome = self.storage.swap_build(live.segment, new_layout.segment, token, drained)
                if outcome == -1:
                    break
                if outcome == -2:
                    raise BloomError(f"rebuild of {self.name!r} lost its lock (took too long?)")
        except BaseException:
            self.storage.abort_build(live.segment, token)
            raise
        new_meta.items_added = count
        new_meta.last_rebuild_at = timezone.now()
        # At once: the swap has retired the old key name. Only the fields this
        # rebuild owns: a write that failed meanwhile may have marked the row stale.
        new_meta.save(update_fields=_REBUILT_FIELDS)
        # Writes missed before this rebuild began are in the new bits (their rows were
        # committed before the items were read); one missed since keeps the filter stale.
        marks = new_meta.stale_marks
        BloomFilter.objects.filter(pk=new_meta.pk, stale_cleared__lt=marks).update(
            stale_cleared=marks
        )
        new_meta.refresh_from_db(fields=["stale_marks", "stale_cleared", "rebuild_error"])
        forget_filters(self.name)
        self._bind(new_meta)
        return count

    def _build(self, meta, layout, items, progress) -> int:
        """Build the bitmap in process (numpy-vectorised when available), then upload."""
        bitmap, count = hashers.build_bitmap(
            hasher_of(meta), items, layout.builder(), self.encoder, progress
        )
        self.storage.upload_build(layout.segment, bitmap, get_config()["UPLOAD_CHUNK_BYTES"])
        return count


def refuse_clear(meta: BloomFilter) -> None:
    """A bound filter is never emptied: its source still has the rows (FilterIsBound)."""
    if meta.is_bound:
        raise FilterIsBound(
            f"filter {meta.name!r} is bound to {meta.bound_source}: emptying it would make every "
            "existing row read as absent (taken values accepted, blocked addresses let through). "
            f"Rebuild it from its source instead: manage.py bloom rebuild {meta.name} "
            "(replaces its content atomically)."
        )


_REBUILT_FIELDS = [
    "capacity",
    "error_rate",
    "num_bits",
    "num_hashes",
    "generation",
    "items_added",
    "last_rebuild_at",
    "updated_at",
]


def _geometry(meta: BloomFilter) -> tuple[int, int, str]:
    return (meta.num_bits, meta.num_hashes, meta.layout)


def layout_for(meta: BloomFilter) -> Layout:
    """The row's layout class bound to its geometry and key names."""
    segment = Segment(
        name=meta.name,
        alias=meta.cache_alias,
        prefix=get_config()["KEY_PREFIX"],
        num_bits=meta.num_bits,
        num_hashes=meta.num_hashes,
        fingerprint=fingerprint(meta),
        generation=meta.generation,
    )
    return layout_class(meta.layout)(segment)


def redis_answers(alias: str) -> bool:
    """Whether the Redis of a cache alias answers a PING now (through its circuit breaker)."""
    return Storage(alias).answers()


# -- lookup and creation ------------------------------------------------------
_filters: dict[str, tuple[float, Filter]] = {}
_lock = threading.Lock()


@forget_on_change
def forget_filters(name: str | None = None) -> None:
    """Drop cached metadata (all of it, or one filter's)."""
    with _lock:
        if name is None:
            _filters.clear()
        else:
            _filters.pop(name, None)


def get_filter(name: str, *, refresh: bool = False, encoder: Callable | None = None) -> Filter:
    """The filter called ``name``; raises ``FilterNotFound``."""
    now = time.monotonic()
    if not refresh and encoder is None:
        cached = _filters.get(name)
        if cached and cached[0] > now:
            return cached[1]
    try:
        meta = BloomFilter.objects.get(name=name)
    except BloomFilter.DoesNotExist:
        raise FilterNotFound(f"no Bloom filter named {name!r}") from None
    handle = Filter(meta, encoder)
    if encoder is None:
        with _lock:
            _filters[name] = (now + get_config()["METADATA_TTL"], handle)
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
) -> Filter:
    """Create the metadata row and the full-size Redis key, or neither.

    ``layout="blocked"`` (the one-word layout) keeps all of an item's bits in one 64-bit word:
    ``contains`` reads one word instead of k bits (several times less Redis
    work per item) for ~25% more memory at p=0.01 (more at lower p).

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
    alias = cache_alias or get_config()["CACHE_ALIAS"]
    from django.conf import settings

    if alias not in settings.CACHES:
        raise ValueError(f"cache alias {alias!r} is not in settings.CACHES")
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
        hasher=hashers.new_hasher_value(hasher),
        generation=new_generation(),
    )
    meta.derive_geometry()
    check_size(meta.num_bits)
    if BloomFilter.objects.filter(name=name).exists():
        raise FilterExists(f"a Bloom filter named {name!r} already exists")
    try:
        with transaction.atomic():
            meta.save()
            handle = Filter(meta)
            handle.storage.create(handle.layout.segment, replace=True)
    except IntegrityError:
        raise FilterExists(f"a Bloom filter named {name!r} already exists") from None
    forget_filters(name)
    return handle


# -- items_added: counted in process, written by counters' background flusher ------
# Keyed by (row id, Redis key) so a recreated filter never inherits old counts.
def _added_key(meta: BloomFilter) -> tuple[int, str]:
    return (meta.pk, f"{get_config()['KEY_PREFIX']}:{meta.name}:{meta.seed}")


def _count_added(meta: BloomFilter, new: int) -> None:
    """Memory only: never a query or a round trip on the add path."""
    if new:
        counters.count_added(meta, _added_key(meta), new)


def flush_added(meta: BloomFilter) -> None:
    """Write this process's pending items_added of ``meta`` now. Never raises."""
    counters.flush_added(_added_key(meta))


__all__ = [
    "Filter",
    "FilterStats",
    "FilterKeyMissing",
    "create_filter",
    "get_filter",
    "forget_filters",
]
