"""The counting layout: a 4-bit counter per position, so items can be removed.

Same geometry (m positions, k per item, the standard layout's positions) as
``standard``, but each position is a 4-bit counter instead of a bit: the key
holds ``4m`` bits, four times a plain filter's memory. ``add`` increments an
item's k counters (saturating at 15), ``remove`` decrements them, atomically,
only when all are non-zero; saturated counters are never decremented (an item
may then never fully leave; no false negatives). Redis commands:
``engine/kinds/counting/commands.py``.

Not ``Mirrorable``: a mirror holds bits and is only ever set, so it would keep removed items.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from django.utils.translation import gettext_lazy

from django_bloom.engine import hashing, sizing
from django_bloom.engine.kinds.base import NO_PARAMS, Measure, RowParams
from django_bloom.engine.kinds.capabilities import Rebuildable, Removable, Transferable
from django_bloom.engine.kinds.counting import commands as counting_ops
from django_bloom.engine.kinds.standard import Bitmap
from django_bloom.engine.segment import Segment

if TYPE_CHECKING:
    from django_bloom.engine.storage import Storage, WriteResult

BITS = counting_ops.COUNTER_BITS
MAX = counting_ops.COUNTER_MAX


class CountingLayout(Bitmap, Removable, Rebuildable, Transferable):
    layout_name = "counting"
    description = gettext_lazy(
        "4-bit counters: items can be removed; 4x the memory of a plain filter"
    )
    merge_refusal = (
        "counting filters are not merged: OR-ing 4-bit counters would break remove (taking "
        "one item out could take out another's count: a false absent), and adding them "
        "would count an item both hold twice, so removing it once would leave it in"
    )

    @classmethod
    def bind(cls, segment: Segment, row: RowParams = NO_PARAMS) -> CountingLayout:
        """The row's m positions become a key of 4m bits (``segment.num_bits``)."""
        return cls(dataclasses.replace(segment, num_bits=segment.num_bits * BITS))

    @property
    def positions_count(self) -> int:
        """The geometry's m (positions), not the key's bits."""
        return self.segment.num_bits // BITS

    def positioner(self) -> Callable[[int, int], list[int]]:
        return hashing.standard_positioner(self.positions_count, self.segment.num_hashes)

    def position_array(self, digests: bytes) -> Any:
        m, k = self.positions_count, self.segment.num_hashes
        return hashing.standard_position_array(digests, m, k)

    # -- operations ---------------------------------------------------------------------
    def contains(self, storage: Storage, flat: Sequence[int]) -> list[bool]:
        return counting_ops.counters_test(storage, self.segment, flat)

    def add(self, storage: Storage, flat: Sequence[int]) -> WriteResult:
        return counting_ops.counters_add(storage, self.segment, flat)

    def remove(self, storage: Storage, flat: Sequence[int]) -> list[bool]:
        return counting_ops.counters_remove(storage, self.segment, flat)

    def measure(self, storage: Storage, chunk_bytes: int) -> Measure:
        """Counters set (non-zero) are what set bits are to a plain filter's formulas."""
        counters = counting_ops.count_nonzero(storage, self.segment, chunk_bytes)
        m, k = self.positions_count, self.segment.num_hashes
        return Measure(
            bits_set=counters,
            estimated_items=sizing.estimate_items(m, k, counters),
            fill_fpr=sizing.fill_fpr(m, counters, k),
            memory_bytes=storage.memory_usage(self.segment),
            bits_per_position=BITS,
        )

    # -- rebuild -------------------------------------------------------------------------
    def builder(self) -> CountingBuilder:
        return CountingBuilder(self.positions_count, self.positioner(), self.position_array)

    def replay_build(self, storage: Storage, flat: Sequence[int]) -> None:
        counting_ops.build_increment(storage, self.segment, flat)


class CountingBuilder:
    """An in-process build of 4-bit counters (``Layout.builder`` for ``counting``):
    every item increments its k counters (saturating at 15), as ``add`` does in Redis.
    numpy when installed, plain Python otherwise (same bytes)."""

    def __init__(
        self,
        num_counters: int,
        positioner: Callable[[int, int], list[int]],
        position_array: Callable[[bytes], Any],
    ):
        self.position_array = position_array
        self.pos = positioner
        np = hashing.numpy_module()
        self.np = np
        if np is not None:
            self.counts = np.zeros(num_counters, dtype=np.uint8)
        else:
            self.counts = bytearray(num_counters)

    def add(self, digests: bytes) -> None:
        if not digests:
            return
        np = self.np
        if np is None:
            counts, pos = self.counts, self.pos
            for h1, h2 in hashing.pairs_of(digests):
                for g in pos(h1, h2):
                    if counts[g] < MAX:
                        counts[g] += 1
            return
        where, times = np.unique(self.position_array(digests).astype(np.intp), return_counts=True)
        current = self.counts[where].astype(np.int64)
        self.counts[where] = np.minimum(current + times, MAX).astype(np.uint8)

    def tobytes(self) -> bytes | bytearray:
        """Two counters per byte, the even one in the high nibble (BITFIELD ``u4 #i``)."""
        np = self.np
        if np is None:
            counts = self.counts + (b"\0" if len(self.counts) % 2 else b"")
            return bytearray(
                (hi << 4) | lo for hi, lo in zip(counts[0::2], counts[1::2], strict=True)
            )
        counts = self.counts
        if len(counts) % 2:
            counts = np.append(counts, np.uint8(0))
        return ((counts[0::2] << 4) | counts[1::2]).astype(np.uint8).tobytes()
