"""The layout protocol: how a filter's bits are placed, and in which Redis segments.

A layout class is chosen by the filter row's ``layout`` value (its ``layout_name``) through the
registry (``engine.layouts``). Bound to one filter's geometry it owns:

- ``geometry(capacity, error_rate)``: (num_bits, num_hashes), a classmethod;
- ``segments``: the Redis strings the filter occupies (each a ``Segment``: key
  names, size, parameters); today's layouts have one;
- ``positioner()`` / ``positions(digests)``: an item's digest -> its bit
  positions, and ``contains`` / ``add``: those positions -> operations run on
  the segment by the storage layer;
- ``builder()``: an in-process bitmap for a rebuild; ``prober()``: a probe of
  a local copy (the mirror);
- ``estimate_items`` / ``fill_fpr``: what a fill count says;
- the lifecycle the ``Filter`` handle runs through it, never on segments itself:
  ``create``, ``clear``, ``delete``, ``count_bits``, ``memory_usage``, ``remove``
  (counting layouts), and ``control``: the segment whose keys carry the
  validator counters, the rebuild lock and the journal;
- ``details(storage)``: layout-specific figures for ``stats()`` and the admin;
  ``supports_mirror`` (False: the local mirror never copies it) and
  ``expiring_keys`` (True: some keys carry a TTL, so the W001 check also warns
  about ``volatile-*`` policies) -- both ClassVars, as used by layout ``rotating``.

``bind(segment, options)`` builds a layout from the row's primary segment and its
``options`` (the row's JSON of layout parameters: growth, slices, segments...);
a multi-segment layout derives its other segments there.

Storage knows segments, never layouts.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any, ClassVar

from django_bloom.engine import format as fmt
from django_bloom.engine import hashing, sizing
from django_bloom.engine.results import WriteResult  # noqa: F401  (re-exported)
from django_bloom.exceptions import BloomError, OperationNotSupported

if TYPE_CHECKING:
    from django_bloom.engine.batches import Batch
    from django_bloom.engine.plans import Plan
    from django_bloom.engine.storage import Storage

NUMPY_MIN_ITEMS = 8  # smaller batches are cheaper in plain Python than through numpy


def _overrides(layout: Layout, method: str) -> bool:
    """Whether ``layout``'s class replaces the base ``Layout``'s ``method``."""
    return getattr(type(layout), method) is not getattr(Layout, method)


@dataclass(frozen=True)
class Segment:
    """One Redis string of a filter: what storage needs to run commands on it."""

    name: str
    alias: str
    prefix: str
    num_bits: int
    num_hashes: int
    fingerprint: int
    generation: str = ""  # part of the bits key name; "" for rows made before generations

    @property
    def num_bytes(self) -> int:
        return (self.num_bits + 7) // 8

    @property
    def trailer_offset(self) -> int:
        return self.num_bytes

    @property
    def key_length(self) -> int:
        return self.num_bytes + fmt.TRAILER_BYTES

    @cached_property
    def keys(self) -> fmt.Keys:
        return fmt.filter_keys(self.prefix, self.name, self.generation)

    @property
    def bits_pattern(self) -> str:
        return fmt.bits_pattern(self.prefix, self.name)

    def trailer(self, flags: int = 0, counter: int = 0) -> bytes:
        return fmt.trailer(self.fingerprint, flags, counter)


@dataclass(frozen=True)
class Layout:
    """A layout bound to one filter's geometry. Subclasses set ``layout_name`` (the
    value stored in the filter row) and the position functions; the base class is
    the bit-per-hash scheme on one segment."""

    layout_name: ClassVar[str] = ""
    # A one-line description for the admin's and ``bloom create``'s choices.
    description: ClassVar[str] = ""
    # Bits of Redis memory per position: 1 for a bitmap, 4 for 4-bit counters (stats, admin).
    bits_per_position: ClassVar[int] = 1
    # Whether ``remove`` takes items out (counting layouts); callers that track what they
    # added (the IP blocklist's unblock) remove only then.
    removable: ClassVar[bool] = False
    # False: the local mirror (engine/mirror.py) never copies this layout; reads go to Redis.
    supports_mirror: ClassVar[bool] = True
    # True: some of its keys carry a TTL, so a volatile-* maxmemory-policy may evict
    # them early (the W001 system check then warns for volatile-* policies too).
    expiring_keys: ClassVar[bool] = False
    # Items are k bit positions in one segment, set by ``add`` and tested by
    # ``contains``: family members (engine/kinds/family/layout.py) can hold this layout.
    family_members: ClassVar[bool] = False
    # Tested on Redis Cluster (every command names a key whose slot routes it): create_filter
    # refuses other layouts, and families, on a DJANGO_BLOOM["CLUSTERS"] alias.
    cluster_ready: ClassVar[bool] = False
    # False: ``Filter.rebuild`` cannot rebuild it (``check_rebuild`` says why), so it is
    # never bound to a source: a rebuild is a bound filter's way back from a lost key.
    rebuildable: ClassVar[bool] = True
    # True: ``capacity`` is a limit (past it the false-positive rate climbs and adds log a
    # warning: ops/capacity.py); False for a layout that grows or forgets.
    fixed_capacity: ClassVar[bool] = True
    segment: Segment

    @classmethod
    def bind(cls, segment: Segment, options: Mapping[str, Any] | None = None) -> Layout:
        """This layout for one row: its primary segment and its layout options.
        One-segment layouts take no options; others override."""
        return cls(segment)

    @classmethod
    def bind_row(
        cls,
        segment: Segment,
        options: Mapping[str, Any] | None,
        capacity: int,
        error_rate: float,
    ) -> Layout:
        """``bind`` for a row (``rows.layout_for``): also given the row's capacity and error
        rate, for layouts that size more than the primary segment (scalable filters)."""
        return cls.bind(segment, options)

    @classmethod
    def row_geometry(
        cls, capacity: int, error_rate: float, options: Mapping[str, Any] | None
    ) -> tuple[int, int]:
        """The row's (num_bits, num_hashes): its primary segment's geometry. Layouts whose
        options change it (a scalable filter's first sub-filter) override."""
        return cls.geometry(capacity, error_rate)

    def check_rebuild(self) -> None:
        """Raise ``OperationNotSupported`` if ``Filter.rebuild`` (one bitmap for
        ``segment``, swapped in) cannot rebuild this layout."""

    def stats_details(self, storage: Storage, chunk_bytes: int) -> dict[str, Any]:
        """Layout-specific figures for ``Filter.stats()`` (``FilterStats.details``);
        ``"num_bits"`` and ``"capacity"`` entries replace the row's in the stats."""
        return {}

    @classmethod
    def validate_options(cls, options: Mapping[str, Any]) -> dict[str, Any]:
        """The options a row may store, checked (ValueError) and with defaults filled in.
        Called by ``create_filter`` before anything is written."""
        if options:
            raise ValueError(
                f"layout {cls.layout_name!r} takes no options (got {', '.join(sorted(options))})"
            )
        return {}

    # -- geometry -------------------------------------------------------------
    @classmethod
    def geometry(cls, capacity: int, error_rate: float) -> tuple[int, int]:
        raise NotImplementedError

    @classmethod
    def largest_segment_bits(cls, num_bits: int, options: Mapping[str, Any]) -> int:
        """Bits the filter's largest segment (one Redis string) holds for ``num_bits``
        positions: all of them here (the size check before anything is written)."""
        return num_bits

    @classmethod
    def oversize(cls, num_bits: int, max_segment_bytes: int) -> tuple[str, dict[str, Any]] | None:
        """(layout, options) a filter of ``num_bits`` becomes when one segment of
        ``max_segment_bytes`` cannot hold it; None: it cannot, ``create_filter`` refuses."""
        return None

    @property
    def segments(self) -> tuple[Segment, ...]:
        return (self.segment,)

    @property
    def control(self) -> Segment:
        """The segment whose keys hold the counters, rebuild lock and journal."""
        return self.segment

    # -- positions ------------------------------------------------------------
    def positioner(self) -> Callable[[int, int], list[int]]:
        """``f(h1, h2) -> [g_0 .. g_{k-1}]``."""
        raise NotImplementedError

    def position_array(self, digests: bytes) -> Any:
        """numpy: the positions of ``item_digests`` output as one uint64 array."""
        raise NotImplementedError

    def positions(self, digests: bytes) -> Sequence[int]:
        """Flat positions of a batch (a numpy array when numpy is installed and it pays)."""
        if hashing.numpy_module() is not None and len(digests) >= 16 * NUMPY_MIN_ITEMS:
            return self.position_array(digests)
        return hashing.positions_of(hashing.pairs_of(digests), self.positioner())

    def positions_of_pairs(self, pairs: Sequence[tuple[int, int]]) -> list[int]:
        return hashing.positions_of(pairs, self.positioner())

    # -- operations on the segment ---------------------------------------------
    def contains(self, storage: Storage, flat: Sequence[int]) -> list[bool]:
        """Per item (k positions each): are all its bits set in Redis?"""
        return storage.test(self.segment, flat)

    def add(self, storage: Storage, flat: Sequence[int]) -> WriteResult:
        """Set every item's bits; per item, whether any was clear."""
        return storage.set(self.segment, flat)

    # -- large batches (Filter.contains_many/add_many; engine/batches.py) ---------------
    # A layout whose ``contains``/``add`` is the one-segment default below streams:
    # storage sends each chunk of ``batch.chunks()`` before the next is hashed, so
    # Redis works while Python hashes (one round trip still). A layout with its own
    # ``contains``/``add`` (and no ``*_batch`` of its own) gets ``batch.whole()``:
    # one call, exactly as if the batch had come whole. (The one-word layout's
    # contains is one cheap operation per item: too little work in Redis for a
    # stream to pay for its extra commands, measured.)
    def contains_batch(self, storage: Storage, batch: Batch) -> list[bool]:
        if type(self).contains is Layout.contains:
            return storage.test_chunks(self.segment, batch.chunks())
        return self.contains(storage, batch.whole())

    def add_batch(self, storage: Storage, batch: Batch) -> WriteResult:
        if type(self).add is Layout.add:
            return storage.set_chunks(self.segment, batch.chunks())
        return self.add(storage, batch.whole())

    def remove(self, storage: Storage, flat: Sequence[int]) -> list[bool]:
        """Take items out (counting layouts only); per item, whether it was (maybe) present."""
        raise OperationNotSupported(
            f"layout {self.layout_name!r} cannot remove items: a Bloom filter's bits are "
            "shared between items. Use a counting filter (layout 'counting') to remove."
        )

    # -- the same operations as plans (engine/plans.py): what the async API runs ------
    # A plan is the commands to send plus how to read their replies, with no I/O, so
    # the sync and the asyncio transports both run it. The defaults below are the
    # bit-per-hash scheme on ``segment`` and apply only while the class keeps the
    # base ``contains`` / ``add`` / ``remove``: a layout that overrides one of those
    # gets None (no plan) until it also overrides the ``*_plan`` method, and the
    # async API then runs its sync method in a worker thread instead.
    def contains_plan(self, flat: Sequence[int]) -> Plan | None:
        """``contains`` as a plan (None: this layout has none; see above)."""
        if _overrides(self, "contains"):
            return None
        from django_bloom.engine import plans  # plans imports storage, which imports us

        return plans.test_plan(self.segment, flat)

    def add_plan(self, flat: Sequence[int]) -> Plan | None:
        """``add`` as a plan whose result is a ``WriteResult`` (None: no plan)."""
        if _overrides(self, "add"):
            return None
        from django_bloom.engine import plans

        return plans.set_plan(self.segment, flat)

    def remove_plan(self, flat: Sequence[int]) -> Plan | None:
        """``remove`` as a plan (None: no plan; the base ``remove`` refuses anyway)."""
        return None

    # -- lifecycle: the handle runs these, never commands on segments itself ---------
    def create(self, storage: Storage, replace: bool = True) -> bool:
        """Make the key(s) at full size (``replace``: over whatever is there)."""
        return storage.create(self.segment, replace=replace)

    def clear(self, storage: Storage) -> None:
        """Empty the filter; its key(s) stay at full size."""
        storage.clear(self.segment)

    def delete(self, storage: Storage) -> None:
        """Delete every key of the filter, every generation included."""
        storage.delete(self.segment)

    def count_bits(self, storage: Storage, chunk_bytes: int) -> int:
        return storage.count_bits(self.segment, chunk_bytes)

    def memory_usage(self, storage: Storage) -> int | None:
        return storage.memory_usage(self.segment)

    # -- rebuild: the handle runs these (``Filter.rebuild``) ---------------------------
    def journal(self, storage: Storage, pairs: Sequence[tuple[int, int]]) -> bool:
        """Journal a write's items for a running rebuild; False if none runs any more."""
        return storage.journal(self.control, fmt.pack_journal(pairs))

    def begin_build(self, storage: Storage, token: str) -> bool:
        """Take the build lock and flag the live key(s); False if a rebuild runs."""
        return storage.begin_build(self.control, token)

    def abort_build(self, storage: Storage, token: str) -> None:
        storage.abort_build(self.control, token)

    def upload_build(self, storage: Storage, bitmap: bytes | bytearray, chunk_bytes: int) -> None:
        """Write the in-process bitmap (``builder()``'s) to the build key(s)."""
        storage.upload_build(self.segment, bitmap, chunk_bytes)

    def finish_build(self, storage: Storage, live: Layout, token: str) -> None:
        """Replay the journal of ``live`` (the layout being replaced) into the build
        key and swap it in, atomically with the journal's length (scripts.SWAP)."""
        drained = 0
        while True:
            entries = storage.read_journal(live.control, drained)
            if entries:
                flat = self.positions_of_pairs(fmt.unpack_journal(entries))
                self.replay_build(storage, flat)
                drained += len(entries)
            outcome = storage.swap_build(live.segment, self.segment, token, drained)
            if outcome == -1:
                return
            if outcome == -2:
                raise BloomError(f"rebuild of {self.name!r} lost its lock (took too long?)")

    # -- in process: rebuild and mirror -------------------------------------------
    def builder(self, use_numpy: bool | None = None) -> hashing.BitmapBuilder:
        return hashing.BitmapBuilder(
            self.segment.num_bits, self.positioner(), self.position_array, use_numpy
        )

    def replay_build(self, storage: Storage, flat: Sequence[int]) -> None:
        """Items journaled during a rebuild, written into this (new) layout's build key."""
        storage.set_build_bits(self.segment, flat)

    def prober(self) -> hashing.Prober:
        """``probe(h1, h2, bitmap)`` on a local copy of the segment's bitmap."""
        return hashing.prober_of(self.positioner())

    # -- what a fill count says ----------------------------------------------
    def estimate_items(self, bits_set: int) -> float:
        return sizing.estimate_items(self.num_bits, self.num_hashes, bits_set)

    def fill_fpr(self, bits_set: int) -> float:
        return sizing.fill_fpr(self.num_bits, bits_set, self.num_hashes)

    # -- the single segment's view (one-segment layouts; tests and tools read it) ---
    @property
    def name(self) -> str:
        """The filter's name."""
        return self.segment.name

    @property
    def num_bits(self) -> int:
        return self.segment.num_bits

    @property
    def num_hashes(self) -> int:
        return self.segment.num_hashes

    @property
    def num_bytes(self) -> int:
        return self.segment.num_bytes

    @property
    def key_length(self) -> int:
        return sum(s.key_length for s in self.segments)

    @property
    def trailer_offset(self) -> int:
        return self.segment.trailer_offset

    @property
    def keys(self) -> fmt.Keys:
        return self.segment.keys

    @property
    def fingerprint(self) -> int:
        return self.segment.fingerprint

    @property
    def alias(self) -> str:
        return self.segment.alias

    @property
    def bits_pattern(self) -> str:
        return self.segment.bits_pattern

    def trailer(self, flags: int = 0, counter: int = 0) -> bytes:
        return self.segment.trailer(flags, counter)
