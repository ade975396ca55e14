"""``Filter``: a handle on one Bloom filter. Get one with ``django_bloom.get_filter``
(services.py). Its stats are ``filter_stats.py``, its rebuild ``rebuild.py``, whole-bitmap
access ``bitmap.py``, the async methods ``async_filter.py`` (mixins). The public item
operations (``contains``, ``add``, ``remove``, their batches and ``a*`` twins, ``rebuild``)
are written once in ``normalizing.py``, for this handle and its ``without_normalizer``;
each runs a private operation here (``_contains``, ``_add`` ...)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from django.db import DatabaseError
from django.utils.module_loading import import_string

from django_bloom import capacity, counters
from django_bloom.async_filter import AsyncAccess
from django_bloom.bitmap import BitmapAccess
from django_bloom.conf import get_config
from django_bloom.engine import hashing
from django_bloom.engine.batches import Batch
from django_bloom.engine.kinds.capabilities import ItemBytes, Removable, pair_positions
from django_bloom.engine.mirror import mirror_for
from django_bloom.engine.segment import Segment, WriteResult
from django_bloom.engine.storage import Storage
from django_bloom.exceptions import (
    FilterKeyMissing,
    FilterNotFound,
    OperationNotSupported,
)
from django_bloom.filter_stats import StatsAccess
from django_bloom.models import BloomFilter
from django_bloom.normalizing import Normalizing, WithoutNormalizer, row_normalizer
from django_bloom.rebuild import RebuildAccess
from django_bloom.registry import (
    forget_filters,
    hasher_of,
    layout_for,
    refuse_clear,
)
from django_bloom.transfer import TransferAccess

_UNSET = object()
# After a re-read found the row unchanged (the key is really gone), calls within this
# many seconds raise at once instead of re-reading the row again.
REFRESH_BACKOFF_SECONDS = 0.5


logger = logging.getLogger("django_bloom.services")


class _Bound:
    """What one row's geometry fixes for the hot path: the row, its key layout,
    its position function and its local mirror. A handle swaps the whole object
    when it refreshes, and each operation reads it once, so no thread ever sends
    one geometry's positions to another geometry's key."""

    __slots__ = ("meta", "layout", "positions", "local", "watch", "raw")

    def __init__(self, meta: BloomFilter, member: str | int | None = None):
        self.meta = meta
        self.layout = layout_for(meta, member)
        self.positions = self.layout.positioner()
        self.local: Any = _UNSET  # the mirror, resolved on first read
        self.watch = capacity.watches(self.layout, member)
        # The layout takes items' bytes as they are, not digests (native, raw_items=True).
        self.raw = isinstance(self.layout, ItemBytes) and self.layout.raw_items


class Filter(Normalizing, StatsAccess, RebuildAccess, BitmapAccess, AsyncAccess, TransferAccess):
    """A handle on one Bloom filter. Cheap; get one with ``get_filter(name)``.

    Async code awaits ``acontains``, ``acontains_many``, ``aadd``, ``aadd_many``,
    ``aremove`` and ``aremove_many`` (async_filter.py): no thread per call.

    A handle whose key is gone because the filter was resized (rebuilt with
    another geometry) in the meantime re-reads its row and retries once, so a
    long-lived handle heals; see ``_refresh``.

    A handle on one member of a filter family (``member``: ``get_filter(name,
    member=...)``) works on that member's key only (see docs/families.md).

    Text items go through the row's normaliser first (``normalizing.py``), in every
    operation; ``without_normalizer`` takes items already normalised.
    """

    def __init__(
        self,
        meta: BloomFilter,
        encoder: Callable | None = None,
        member: str | int | None = None,
    ):
        self.member = member
        self.storage = Storage(meta.cache_alias)
        self.encoder = encoder or (import_string(meta.encoder) if meta.encoder else None)
        self.hasher = hasher_of(meta)  # the row's scheme and key: fixed for its lifetime
        self._handle = self  # what the item operations run on (normalizing.py)
        self._raw = WithoutNormalizer(self)
        self._bind(meta)

    def _bind(self, meta: BloomFilter) -> None:
        self._bound = _Bound(meta, self.member)  # first: the hot path reads only this
        self._unchanged_at = float("-inf")  # monotonic time of the last fruitless re-read
        self._normalize = row_normalizer(meta)
        self.meta = meta
        self.name = meta.name
        self.layout = self._bound.layout

    def __repr__(self) -> str:
        m = self.meta
        member = "" if self.member is None else f" member={self.member!r}"
        return (
            f"<Filter {m.name!r}{member} n={m.capacity} p={m.error_rate} "
            f"m={m.num_bits} k={m.num_hashes}>"
        )

    # -- what the rest of the package asks (it never reaches into storage or layout) ---
    @property
    def identity(self) -> tuple[str, str]:
        """(live bits key, cache alias): names this filter's current key across handles."""
        return (self._bound.layout.segment.keys.bits, self.storage.alias)

    @property
    def counters_segment(self) -> Segment:
        """The segment whose ``counters`` key holds the validator's outcomes and
        ``items_added`` (counters.py); a family member's is the family's."""
        return self._bound.layout.control

    @property
    def key_bytes(self) -> int:
        """Bytes the filter's Redis key(s) hold: bitmap and trailer."""
        return self._bound.layout.key_bytes

    def count_new(self, new: int) -> None:
        """Count ``new`` items a caller's own script added (the Scrapy dupefilter's claims
        carry its done marks): ``items_added`` and the past-capacity warning, as ``add``."""
        self._counted(self._bound, new)

    @property
    def can_remove(self) -> bool:
        """Whether ``remove`` takes items out (a counting filter) instead of raising."""
        return isinstance(self._bound.layout, Removable)

    # -- hashing ------------------------------------------------------------
    def hashes(self, items: Iterable[Any]) -> list[tuple[int, int]]:
        """(h1, h2) per item. Validates every item before anything is sent."""
        return hashing.pairs_of(self.hasher.item_digests(items, self.encoder))

    def positions(self, pairs: Sequence[tuple[int, int]]) -> list[int]:
        return pair_positions(self._bound.layout, pairs)

    def _digest(self, item: Any) -> bytes:
        return self.hasher.digest(hashing.item_bytes(item, self.encoder))

    def _digest_one(self, item: Any, bound: _Bound | None = None) -> tuple[bytes, list[int]]:
        bound = bound or self._bound
        if bound.raw:
            data = hashing.item_bytes(item, self.encoder)
            return data, [data]  # type: ignore[list-item]
        digest = self._digest(item)
        return digest, bound.positions(*hashing.PAIR.unpack(digest))

    def _digest_many(self, items: Iterable[Any], bound: _Bound) -> tuple[bytes, Sequence[int]]:
        """Digests and the flat positions of a batch (a numpy array when numpy is installed)."""
        if bound.raw:
            datas = hashing.item_datas(list(items), self.encoder)
            return datas, datas  # type: ignore[return-value]
        digests = self.hasher.item_digests(list(items), self.encoder)
        return digests, bound.layout.positions(digests)

    # -- queries --------------------------------------------------------------
    def _contains(self, item: Any, bound: _Bound) -> bool:
        local = self._mirror(bound)
        if local is not None:
            return local.probe(*hashing.PAIR.unpack(self._digest(item)))
        _digest, flat = self._digest_one(item, bound)
        return bound.layout.contains(self.storage, flat)[0]

    def _batch(self, items: Sequence[Any], bound: _Bound) -> Batch | None:
        """A large batch to hash as the layout asks (``BATCH_STREAM_ITEMS``), else None.
        Every item is validated here, before anything is hashed or sent."""
        size = get_config()["BATCH_STREAM_ITEMS"]
        if not 0 < size < len(items):
            return None
        datas = hashing.item_datas(items, self.encoder)
        return Batch(datas, self.hasher.digests, bound.layout.positions, size)

    def _contains_many(self, items: Sequence[Any], bound: _Bound) -> list[bool]:
        batch = self._batch(items, bound) if self._mirror(bound) is None else None
        if batch is not None:
            return bound.layout.contains_batch(self.storage, batch)
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
        Otherwise the key is really missing: False, and the caller re-raises (and
        for ``REFRESH_BACKOFF_SECONDS`` does so without asking the database again)."""
        if not self._may_refresh():
            return False
        try:
            meta = BloomFilter.objects.get(pk=self.meta.pk)
        except (BloomFilter.DoesNotExist, DatabaseError):
            return False
        return self._rebind_if_moved(meta)

    def _may_refresh(self) -> bool:
        """False within ``REFRESH_BACKOFF_SECONDS`` of a re-read that changed nothing."""
        return time.monotonic() - self._unchanged_at >= REFRESH_BACKOFF_SECONDS

    def _rebind_if_moved(self, meta: BloomFilter) -> bool:
        """Re-bind to the re-read row ``meta`` if it names another key or geometry."""
        if layout_for(meta, self.member) == self._bound.layout:
            self._unchanged_at = time.monotonic()
            return False
        self._bind(meta)
        forget_filters(self.name)
        return True

    # -- writes -------------------------------------------------------------
    def _add(self, item: Any, bound: _Bound) -> bool:
        return self._write(bound, *self._digest_one(item, bound))[0]

    def _add_many(self, items: Sequence[Any], bound: _Bound) -> list[bool]:
        batch = self._batch(items, bound)
        if batch is not None:
            result = bound.layout.add_batch(self.storage, batch)
            return self._wrote(bound, result, batch.all_digests, batch.flats)
        digests, flat = self._digest_many(items, bound)
        if not digests:
            return []
        return self._write(bound, digests, flat)

    def _write(self, bound: _Bound, digests: bytes, flat: Sequence[int]) -> list[bool]:
        result = bound.layout.add(self.storage, flat)
        return self._wrote(bound, result, lambda: digests, [flat])

    def _wrote(
        self,
        bound: _Bound,
        result: WriteResult,
        digests: Callable[[], bytes],
        flats: list[Sequence[int]],
    ) -> list[bool]:
        """After a write: this process's mirror, a running rebuild's journal, the count;
        then its WAIT shortfall, if any (``WriteResult.reported``)."""
        local = self._mirror(bound)
        if local is not None:
            for flat in flats:
                local.apply(flat)
        if result.rebuilding:
            self._journal(bound, digests())
        self._counted(bound, result.was_new.count(True))
        return result.reported()

    def _counted(self, bound: _Bound, new: int) -> None:
        """``new`` items reported new: items_added, and past capacity a warning. Memory
        only: no query, no round trip (counters.py, capacity.py)."""
        if new:
            estimate = counters.count_added(self, new)
            if bound.watch and estimate > bound.meta.capacity:
                capacity.past_capacity(bound.meta, estimate)

    def _journal(self, bound: _Bound, digests: bytes) -> None:
        """A rebuild is filling a fresh key: make sure it gets these items too."""
        pairs = hashing.pairs_of(digests)
        if bound.layout.journal(self.storage, pairs):
            return
        # The rebuild finished between our write and the journal: write again
        # into the new live key (its layout may have changed).
        try:
            fresh = Filter(BloomFilter.objects.get(name=self.name), self.encoder)
        except BloomFilter.DoesNotExist:
            raise FilterNotFound(f"no Bloom filter named {self.name!r}") from None
        forget_filters(self.name)
        fresh.layout.add(fresh.storage, fresh.positions(pairs)).reported()

    def _remove(self, items: Sequence[Any], bound: _Bound) -> list[bool]:
        digests, flat = self._digest_many(items, bound)
        if not digests:
            return []
        if not isinstance(bound.layout, Removable):
            raise OperationNotSupported(
                f"layout {bound.meta.layout!r} cannot remove items: a Bloom filter's bits are "
                "shared between items. Use a counting filter (layout 'counting') to remove."
            )
        return bound.layout.remove(self.storage, flat)

    def clear(self) -> None:
        """Empty the filter (the key is recreated at full size).

        A bound filter (a ``source``, or a blocklist fed by BlockedEntry rows)
        is never emptied: raises ``FilterIsBound``; rebuild it instead.
        """
        current = BloomFilter.objects.get(pk=self.meta.pk)  # the live key, not a stale handle's
        refuse_clear(current)
        layout_for(current, self.member).clear(self.storage)
        if self.member is None:  # a family's items_added counts every member
            counters.set_added(self, 0)

    def delete(self) -> None:
        """Delete the Redis keys (bits keys of every generation) and the metadata row.
        A family member's handle deletes that member's key only (the family stays)."""
        self.layout.delete(self.storage)
        if self.member is not None:
            return
        BloomFilter.objects.filter(pk=self.meta.pk).delete()
        forget_filters(self.name)


def redis_answers(alias: str) -> bool:
    """Whether the Redis of a cache alias answers a PING now (through its circuit breaker)."""
    return Storage(alias).answers()
