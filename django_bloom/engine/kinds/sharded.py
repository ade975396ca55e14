"""The sharded layout: S segments, each its own Redis string under its own hash tag.

A filter larger than one Redis string (512 MiB), or one meant to spread over a
Redis Cluster, is split into ``segments`` equal bitmaps. Segment 0 is the row's
primary segment (keys ``<prefix>:{<name>}:v1:...``, the same names a standard
filter has); segment ``j`` >= 1 uses the name ``<name>/<j>``, so its keys are
``<prefix>:{<name>/<j>}:v1:...``: another hash tag, another cluster slot.
``<name>/<j>.<salt>`` when a salt is needed to give every segment its own share
of the 16384 slots (``segment_names``: segments spread evenly over masters that
own equal slot ranges). Filter names are slugs, so ``/`` never collides with a
real filter name.

An item's segment is a mix of its digest (``segment_of``: a multiply-shift of
h1, independent of the positions' ``mod m``); all of its k bits are in that
segment, positioned as the standard layout does inside it. So one item is one
command to one server, and a batch is one command per segment touched, all
sent before any reply is read (``Storage.test_segments``/``set_segments``).

Flat positions are global: segment ``j``'s bit ``g`` is ``j * segment_bits + g``
(``segment_bits`` is a multiple of 64, so segment j's bytes are a byte-aligned
slice of the concatenated bitmap: the rebuild's in-process builder makes the
whole bitmap and uploads each slice to its segment).

Each segment has its own trailer (fingerprint derived from the row's and the
segment's index, write counter, REBUILDING flag): a lost or foreign segment
raises ``FilterKeyMissing`` exactly as a lost standard key does. A rebuild
runs the one-key protocol (lock, journal, atomic swap) on every segment, each
in its own slot; see ``finish_build``. The local mirror is not offered
(``mirror_for`` returns None for multi-segment layouts): reads go to Redis.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Any

import mmh3
from django.utils.translation import gettext_lazy
from redis.crc import key_slot

from django_bloom.engine import format as fmt
from django_bloom.engine import hashing
from django_bloom.engine.hashing import MASK64
from django_bloom.engine.kinds.base import NO_PARAMS, RowParams, check_option_names, int_option
from django_bloom.engine.kinds.capabilities import (
    ClusterReady,
    Mergeable,
    Rebuildable,
    pair_positions,
    replay_and_swap,
)
from django_bloom.engine.kinds.standard import Bitmap
from django_bloom.engine.segment import Segment, WriteResult
from django_bloom.engine.sizing import segment_bits, segments_needed  # noqa: F401  (re-exported)

if TYPE_CHECKING:
    from django_bloom.engine.storage import Storage

DEFAULT_SEGMENTS = 8
MAX_SEGMENTS = 4096
_MIX = 0x9E3779B97F4A7C15  # the golden-ratio multiplier (Fibonacci hashing)


def segment_of(h1: int, segments: int) -> int:
    """An item's segment: the top 32 bits of ``h1 * golden`` scaled to ``segments``."""
    return ((((h1 * _MIX) & MASK64) >> 32) * segments) >> 32


CLUSTER_SLOTS = 16384
BALANCE_MAX_SEGMENTS = 256  # above: plain names (many segments spread well by chance)


@lru_cache(maxsize=256)
def segment_names(name: str, count: int) -> tuple[str, ...]:
    """The segments' names (their hash tags). Segment 0 is the filter's own name.

    Segment j >= 1 is ``<name>/<j>``, or ``<name>/<j>.<salt>`` with the smallest salt
    that puts its cluster slot (CRC16 of the tag mod 16384) in its own 1/count-th of
    the slot range, the range segment 0's slot leaves free. Masters that own equal
    contiguous slot ranges (``redis-cli --cluster create``) then hold equal numbers of
    segments: with random tags, 12 segments on 3 masters were spread 7/3/2, capping
    the scale-out at 12/7 = 1.7x instead of 3x. Deterministic: every process derives
    the same names.
    """
    if count > BALANCE_MAX_SEGMENTS:
        return (name, *(f"{name}/{j}" for j in range(1, count)))
    first = key_slot(name.encode()) * count // CLUSTER_SLOTS
    ranges = [r for r in range(count) if r != first]
    names = [name]
    for j, wanted in zip(range(1, count), ranges, strict=True):
        salt = 0
        while True:
            tag = f"{name}/{j}" if salt == 0 else f"{name}/{j}.{salt}"
            if key_slot(tag.encode()) * count // CLUSTER_SLOTS == wanted:
                break
            salt += 1
        names.append(tag)
    return tuple(names)


def segment_fingerprint(fingerprint: int, index: int) -> int:
    """Segment ``index``'s trailer fingerprint: the row's for segment 0, else derived,
    so one segment's key copied over another's is detected."""
    if index == 0:
        return fingerprint
    return mmh3.hash(f"{fingerprint}/{index}".encode(), 0, signed=False) or 1


@dataclass(frozen=True)
class ShardedLayout(Bitmap, Rebuildable, ClusterReady, Mergeable):
    """Not Mirrorable: reads go to Redis (one item, one segment, one command)."""

    layout_name = "sharded"
    description = gettext_lazy(
        "S segments, each its own key and cluster slot; an item's bits in one segment"
    )
    shards: tuple[Segment, ...] = ()

    @classmethod
    def bind(cls, segment: Segment, row: RowParams = NO_PARAMS) -> ShardedLayout:
        count = int(row.options.get("segments", DEFAULT_SEGMENTS))
        each = segment_bits(segment.num_bits, count)
        names = segment_names(segment.name, count)
        shards = tuple(
            dataclasses.replace(
                segment,
                name=names[j],
                num_bits=each,
                fingerprint=segment_fingerprint(segment.fingerprint, j),
            )
            for j in range(count)
        )
        return cls(shards[0], shards)

    @classmethod
    def validate_options(cls, options: Mapping[str, Any]) -> dict[str, Any]:
        check_option_names("sharded", options, ("segments",))
        count = int_option("sharded", options, "segments", DEFAULT_SEGMENTS, MAX_SEGMENTS)
        return {"segments": count}

    # -- geometry: the whole filter ---------------------------------------------
    @property
    def segments(self) -> tuple[Segment, ...]:
        return self.shards

    @property
    def segment_bits(self) -> int:
        return self.segment.num_bits

    @property
    def num_bits(self) -> int:
        return self.segment_bits * len(self.shards)

    # -- positions: global (segment j's bit g is j * segment_bits + g) ----------------
    def positioner(self) -> Callable[[int, int], list[int]]:
        steps = hashing.step_constants(self.segment.num_hashes)
        m, count = self.segment_bits, len(self.shards)

        def positions(h1: int, h2: int) -> list[int]:
            base = segment_of(h1, count) * m
            return [base + ((h1 + i * h2 + c) & MASK64) % m for i, c in steps]

        return positions

    def position_array(self, digests: bytes) -> Any:
        np = hashing.numpy_module()
        m, k = self.segment_bits, self.segment.num_hashes
        local = hashing.standard_position_array(digests, m, k).reshape(-1, k)
        h1 = np.frombuffer(digests, dtype="<u8")[0::2]
        with np.errstate(over="ignore"):
            seg = (((h1 * np.uint64(_MIX)) >> np.uint64(32)) * np.uint64(len(self.shards))) >> (
                np.uint64(32)
            )
        return (local + (seg * np.uint64(m))[:, None]).reshape(-1)

    def builder(self) -> hashing.BitmapBuilder:
        """The whole filter's bitmap (every segment's, concatenated) for a rebuild."""
        return hashing.BitmapBuilder(self.num_bits, self.positioner(), self.position_array)

    def split(self, flat: Sequence[int]) -> list[tuple[int, Sequence[int], list[int]]]:
        """Per segment touched: (segment index, its items' local positions, the items'
        indexes in the batch)."""
        k, m = self.segment.num_hashes, self.segment_bits
        np = hashing.numpy_module()
        if np is not None and isinstance(flat, np.ndarray):
            grid = flat.reshape(-1, k)
            seg = grid[:, 0] // np.uint64(m)
            out = []
            for j in np.unique(seg).tolist():
                rows = np.nonzero(seg == j)[0]
                local = (grid[rows] - np.uint64(j * m)).reshape(-1)
                out.append((int(j), local, rows.tolist()))
            return out
        groups: dict[int, tuple[list[int], list[int]]] = {}
        for index, start in enumerate(range(0, len(flat), k)):
            j = flat[start] // m
            base = j * m
            local, items = groups.setdefault(j, ([], []))
            local += [g - base for g in flat[start : start + k]]
            items.append(index)
        return [(j, local, items) for j, (local, items) in groups.items()]

    # -- operations: one command per segment touched, one round trip ------------------
    def contains(self, storage: Storage, flat: Sequence[int]) -> list[bool]:
        parts = [(self.shards[j], local, items) for j, local, items in self.split(flat)]
        return storage.test_segments(parts, len(flat) // self.segment.num_hashes)

    def add(self, storage: Storage, flat: Sequence[int]) -> WriteResult:
        parts = [(self.shards[j], local, items) for j, local, items in self.split(flat)]
        return storage.set_segments(parts, len(flat) // self.segment.num_hashes)

    # -- rebuild: the one-key protocol on every segment -------------------------------
    def journal(self, storage: Storage, pairs: Sequence[tuple[int, int]]) -> bool:
        groups: dict[int, list[tuple[int, int]]] = {}
        for pair in pairs:
            groups.setdefault(segment_of(pair[0], len(self.shards)), []).append(pair)
        taken = [
            storage.journal(self.shards[j], fmt.pack_journal(group)) for j, group in groups.items()
        ]
        return all(taken)

    def begin_build(self, storage: Storage, token: str) -> bool:
        """Take every segment's build lock (segment 0's first: a second rebuild stops
        there). If one is held by another token (a crashed rebuild's), give back the
        ones taken and refuse."""
        for index, shard in enumerate(self.shards):
            if not storage.begin_build(shard, token):
                for taken in self.shards[:index]:
                    storage.abort_build(taken, token)
                return False
        return True

    def abort_build(self, storage: Storage, token: str) -> None:
        for shard in self.shards:
            storage.abort_build(shard, token)

    def upload_build(self, storage: Storage, bitmap: bytes | bytearray, chunk_bytes: int) -> None:
        view, size = memoryview(bitmap), self.segment_bits // 8
        for j, shard in enumerate(self.shards):
            storage.upload_build(shard, view[j * size : (j + 1) * size], chunk_bytes)

    def finish_build(self, storage: Storage, live: Any, token: str) -> None:
        """Swap segment after segment, each atomically with its own journal (its keys
        share one hash tag, so one Lua script sees them even on a cluster).

        An item's segment depends only on its digest and the segment count (which
        a rebuild keeps), so a write journaled on live segment j belongs to new
        segment j. Until segment j is swapped its writers see REBUILDING and
        journal there; once swapped they write the new key. No reader ever sees
        an added item absent. With a new geometry (a resize) handles of the old
        one miss on a swapped segment (FilterKeyMissing, never "absent") until the
        row is saved, right after the last swap.
        """
        if len(live.segments) != len(self.shards):
            raise ValueError("a rebuild keeps a sharded filter's segment count")
        for j, (old, new) in enumerate(zip(live.segments, self.shards, strict=True)):
            self._swap_one(storage, old, new, j, token)

    def _swap_one(self, storage: Storage, old: Segment, new: Segment, j: int, token: str) -> None:
        base = j * self.segment_bits

        def replay(entries: list[bytes]) -> None:
            flat = pair_positions(self, fmt.unpack_journal(entries))
            storage.set_build_bits(new, [g - base for g in flat])

        def swap(drained: int) -> int:
            return storage.swap_build(old, new, token, drained)

        replay_and_swap(storage, old, replay, swap, self.segment.name)
