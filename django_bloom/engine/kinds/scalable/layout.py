"""The scalable layout: a filter that grows (Almeida et al. 2007, "Scalable Bloom Filters").

Sub-filter i has capacity ``C * growth**i`` and error rate ``P0 * r**i`` with
``P0 = P * (1 - r)`` (r: ``tightening``), so the compound false-positive rate stays
below ``P0 / (1 - r) = P`` however many sub-filters there are (a geometric series;
pybloom-live starts at P0 = P and drifts to ~P / (1 - r), e.g. 6.7P at r = 0.85).
Each sub-filter is a standard-format Redis string (bitmap + trailer with its own
fingerprint) under the filter's hash tag; sub-filter 0 is the row's bits key, the
others are named ``<generation>s<i>``. A control hash (no TTL) records ``n`` (how
many exist) and ``items`` (new items counted into the newest).

An item's positions in sub-filter i come from the same digest (enhanced double
hashing over that sub-filter's m_i, k_i), computed in Python; ``flat`` for this
layout is therefore the items' hash pairs ``[h1, h2, h1, h2, ...]`` and ``add`` /
``contains`` turn them into per-sub-filter positions for the sub-filters the client
believes live (plus spares for a growth). The scripts (``engine/kinds/scalable/commands.py``,
sent by ``trips.py``) run atomically over all sub-filters; a stale view gets "retry with n" and the
client retries (bounded).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import mmh3
from django.utils.translation import gettext_lazy

from django_bloom.engine import hashing, sizing
from django_bloom.engine.kinds import base
from django_bloom.engine.kinds.base import NO_PARAMS, Layout, Measure, RowParams
from django_bloom.engine.kinds.capabilities import Transferable
from django_bloom.engine.kinds.scalable import commands as scalable_ops
from django_bloom.engine.kinds.scalable.limits import full_message, lifetime, unsizeable
from django_bloom.engine.kinds.scalable.trips import (
    ATTEMPTS,
    MAX_CONTAINS_POSITIONS_PER_TRIP,
    ScalableTrips,
)
from django_bloom.engine.segment import Segment, WriteResult
from django_bloom.exceptions import (
    BloomError,
    FilterFull,
    OperationNotSupported,
)

if TYPE_CHECKING:
    from django_bloom.engine.storage import Storage

DEFAULT_GROWTH = 2
DEFAULT_TIGHTENING = 0.85
MAX_GROWTH = 16


def _pairs(flat: Sequence[int]) -> list[tuple[int, int]]:
    flat = flat.tolist() if hasattr(flat, "tolist") else list(flat)
    return list(zip(flat[0::2], flat[1::2], strict=True))


@dataclass(frozen=True)
class ScalableLayout(ScalableTrips, Layout, Transferable):
    """Transferable (a part per sub-filter); not Rebuildable (a rebuild swaps in one bitmap;
    this kind is several), not Mirrorable (reads go to Redis)."""

    layout_name = "scalable"
    description = gettext_lazy(
        "grows by adding sub-filters when full; total false-positive rate stays ≤ p"
    )
    rebuild_refusal = (
        "filter {name!r} is scalable: it cannot be rebuilt from a source (a rebuild swaps in "
        "one bitmap). Create a standard filter sized for the data and fill it, or delete and "
        "recreate this one and add the items again."
    )
    merge_refusal = (
        "scalable filters are not merged: each sub-filter is filled to its own capacity "
        "before the next is made, and OR-ing two would overfill them, past the "
        "false-positive rate the filter promises"
    )

    capacity: int = 1
    error_rate: float = 0.01
    growth: int = DEFAULT_GROWTH
    tightening: float = DEFAULT_TIGHTENING
    # This process's view: "n" (live sub-filters last seen),
    # sub-filter segments by index. Not part of the layout's identity.
    _view: dict = field(default_factory=dict, compare=False, repr=False, hash=False)

    # -- binding and options -----------------------------------------------------
    @classmethod
    def validate_options(cls, options: Mapping[str, Any]) -> dict[str, Any]:
        base.check_option_names("scalable", options, ("growth", "tightening"))
        growth = base.int_option("scalable", options, "growth", DEFAULT_GROWTH, MAX_GROWTH)
        tightening = options.get("tightening", DEFAULT_TIGHTENING)
        if isinstance(tightening, bool) or not isinstance(tightening, (int, float)):
            raise base.OptionTypeError(
                f"scalable option 'tightening' must be a number, got {tightening!r}"
            )
        if not (0.0 < tightening < 1.0) or math.isnan(tightening):
            raise ValueError(
                f"scalable 'tightening' must be strictly between 0 and 1, not {tightening}"
            )
        return {"growth": growth, "tightening": float(tightening)}

    @classmethod
    def bind(cls, segment: Segment, row: RowParams = NO_PARAMS) -> Layout:
        if not row.capacity or not row.error_rate:
            raise TypeError("a scalable layout is bound to a row's capacity and error rate")
        return cls(
            segment,
            capacity=row.capacity,
            error_rate=row.error_rate,
            growth=row.options.get("growth", DEFAULT_GROWTH),
            tightening=row.options.get("tightening", DEFAULT_TIGHTENING),
        )

    @classmethod
    def geometry(
        cls, capacity: int, error_rate: float, options: Mapping[str, Any] | None = None
    ) -> tuple[int, int]:
        """Sub-filter 0's geometry; ValueError (before anything is written) when a
        sub-filter the filter may grow to could not be sized (``lifetime``)."""
        growth = (options or {}).get("growth", DEFAULT_GROWTH)
        tightening = (options or {}).get("tightening", DEFAULT_TIGHTENING)
        life, end = lifetime(capacity, error_rate, growth, tightening)
        if end == "rate":
            raise ValueError(unsizeable(capacity, error_rate, growth, tightening, life))
        return sizing.standard_geometry(capacity, error_rate * (1 - tightening))

    # -- sub-filters --------------------------------------------------------------
    def sub_capacity(self, i: int) -> int:
        return self.capacity * self.growth**i

    def sub_error_rate(self, i: int) -> float:
        return self.error_rate * (1 - self.tightening) * self.tightening**i

    def sub(self, i: int) -> Segment:
        """Sub-filter ``i``'s segment (0: the row's own)."""
        if i == 0:
            return self.segment
        cache = self._view.setdefault("subs", {})
        found = cache.get(i)
        if found is None:
            if i >= self.life:
                raise self._full()
            m, k = sizing.standard_geometry(self.sub_capacity(i), self.sub_error_rate(i))
            s = self.segment
            text = f"{s.fingerprint}|scalable|{i}|{m}|{k}"
            found = Segment(
                name=s.name,
                alias=s.alias,
                prefix=s.prefix,
                num_bits=m,
                num_hashes=k,
                fingerprint=mmh3.hash(text.encode(), 0, signed=False) or 1,
                generation=f"{s.generation}s{i}",
            )
            cache[i] = found
        return found

    def _lifetime(self) -> tuple[int, str]:
        found = self._view.get("life")
        if found is None:
            found = self._view["life"] = lifetime(
                self.capacity, self.error_rate, self.growth, self.tightening
            )
        return found

    @property
    def life(self) -> int:
        """How many sub-filters this filter can have (``limits.lifetime``)."""
        return self._lifetime()[0]

    def _full(self) -> FilterFull:
        return FilterFull(full_message(self.segment.name, self.sub_capacity, *self._lifetime()))

    def _positioners(self, count: int) -> list[Callable[[int, int], list[int]]]:
        cache = self._view.setdefault("positioners", {})
        out = []
        for i in range(count):
            if i not in cache:
                seg = self.sub(i)
                cache[i] = hashing.standard_positioner(seg.num_bits, seg.num_hashes)
            out.append(cache[i])
        return out

    @property
    def control_key(self) -> str:
        """The control hash: ``n`` sub-filters, ``items`` in the newest. No TTL."""
        return self.segment.keys.bits[: -len("bits")] + "scalable"

    @property
    def live_count(self) -> int:
        """Sub-filters this process last saw (updated by every operation)."""
        return self._view.get("n", 1)

    @property
    def segments(self) -> tuple[Segment, ...]:
        return tuple(self.sub(i) for i in range(self.live_count))

    # -- positions: this layout's "flat" is the hash pairs ------------------------
    def positioner(self) -> Callable[[int, int], list[int]]:
        return lambda h1, h2: [h1, h2]

    def positions(self, digests: bytes) -> Sequence[int]:
        return [h for pair in hashing.pairs_of(digests) for h in pair]

    def position_array(self, digests: bytes) -> Any:
        raise OperationNotSupported("scalable filters compute positions per sub-filter")

    # -- operations ---------------------------------------------------------------
    def contains(self, storage: Storage, flat: Sequence[int]) -> list[bool]:
        """One pipelined round trip, no script: ``HGET`` of the live count, then the
        standard ``BITFIELD_RO`` reads of every sub-filter this process knows. Redis runs
        them in order, so the count is read first: an add that completed before it is in
        a sub-filter below that count, whose bits are only ever set. More sub-filters
        than known: retry with the positions of the new ones."""
        pairs = _pairs(flat)
        per_trip = max(1, MAX_CONTAINS_POSITIONS_PER_TRIP // self._stride(self.live_count))
        if len(pairs) > per_trip:  # a huge batch: several round trips, each well under timeout
            return [
                hit
                for start in range(0, len(pairs), per_trip)
                for hit in self._contains_trip(storage, pairs[start : start + per_trip])
            ]
        return self._contains_trip(storage, pairs)

    def add(self, storage: Storage, flat: Sequence[int]) -> WriteResult:
        return WriteResult(self._run(storage, _pairs(flat), write=True), False)

    # -- lifecycle ------------------------------------------------------------------
    def create(self, storage: Storage, replace: bool = True) -> bool:
        s = self.segment
        payload = scalable_ops.pack_eval(
            scalable_ops.CREATE,
            [self.control_key, s.keys.bits],
            [s.trailer_offset, s.trailer(), "1" if replace else "0"],
        )
        self._view["n"] = 1
        return bool(storage.sent_replies([payload])[0])

    def clear(self, storage: Storage) -> None:
        s = self.segment
        total = max(self.live_count, self._read_control(storage)[0])
        for _attempt in range(ATTEMPTS):
            keys = [self.control_key, *(self.sub(i).keys.bits for i in range(total))]
            payload = scalable_ops.pack_eval(
                scalable_ops.CLEAR, keys, [s.trailer_offset, s.trailer()]
            )
            status, live = storage.sent_replies([payload])[0]
            if status == 0:
                self._view["n"] = 1
                return
            total = int(live)
        raise BloomError(
            f"scalable filter {self.segment.name!r}: clear lost the race to growth; retry"
        )

    def delete(self, storage: Storage) -> None:
        storage.delete(self.segment)  # every bits key of the filter: sub-filters included
        storage.command("UNLINK", self.control_key)

    # -- export and import (Transferable): a part per sub-filter, the control hash's state --
    def dump_state(self, storage: Storage) -> dict[str, Any]:
        n, items = self._read_control(storage, strict=True)
        return {"sub_filters": n, "items_in_newest": items}

    def transfer_parts(self, state: Mapping[str, Any]) -> list[tuple[str, Segment]]:
        return [(str(i), self.sub(i)) for i in range(int(state.get("sub_filters", 1)))]

    def restore_state(self, storage: Storage, state: Mapping[str, Any]) -> None:
        n, items = int(state["sub_filters"]), int(state["items_in_newest"])
        storage.command("HSET", self.control_key, "n", n, "items", items)

    def _read_control(self, storage: Storage, strict: bool = False) -> tuple[int, int]:
        """(n, items in the newest) from the control hash; (1, 0) if missing unless strict."""
        raw = storage.command("HMGET", self.control_key, "n", "items")
        if raw is None or raw[0] is None:
            if strict:
                raise self._missing(self.control_key)
            return 1, 0
        n, items = int(raw[0]), int(raw[1] or 0)
        self._view["n"] = n
        return n, items

    def measure(self, storage: Storage, chunk_bytes: int) -> Measure:
        """Every live sub-filter's fill: items are the sum of theirs, the false-positive
        rate is compound (the chance a stranger is maybe in at least one sub-filter); the
        details list them (capacity and num_bits: the grown filter's)."""
        n, items = self._read_control(storage, strict=True)
        subs, miss = [], 1.0
        for i in range(n):
            s = self.sub(i)
            bits = storage.count_bits(s, chunk_bytes)
            fpr = sizing.fill_fpr(s.num_bits, bits, s.num_hashes)
            miss *= 1.0 - fpr
            subs.append(
                {
                    "index": i,
                    "capacity": self.sub_capacity(i),
                    "error_rate": self.sub_error_rate(i),
                    "num_bits": s.num_bits,
                    "num_hashes": s.num_hashes,
                    "bits_set": bits,
                    "fill_ratio": bits / s.num_bits,
                    "fpr": fpr,
                    "estimated_items": sizing.estimate_items(s.num_bits, s.num_hashes, bits),
                }
            )
        keys = [*(self.sub(i).keys.bits for i in range(n)), self.control_key]
        known = [size for size in storage.memory_usages(keys) if size is not None]
        return Measure(
            bits_set=sum(sub["bits_set"] for sub in subs),
            estimated_items=sum(sub.pop("estimated_items") for sub in subs),
            fill_fpr=1.0 - miss,
            memory_bytes=sum(known) if known else None,
            details={
                "sub_filters": n,
                "growth": self.growth,
                "tightening": self.tightening,
                "items_in_newest": items,
                "capacity": sum(self.sub_capacity(i) for i in range(n)),
                "initial_capacity": self.capacity,
                "num_bits": sum(sub["num_bits"] for sub in subs),
                "compound_fpr": 1.0 - miss,
                "fpr_bound": self.error_rate,
                "sub_filter_stats": subs,
            },
        )
