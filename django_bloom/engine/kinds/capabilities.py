"""What only some kinds do: capabilities a kind opts into by inheriting them.

Callers ask ``isinstance(layout, Removable)`` (like Django's hashers answering
``must_update``), never a flag on the base. The mixins with methods give the
one-segment defaults (engine/kinds/base.py's scheme); a kind with several segments
overrides them.

=================  =====================================================================
``Removable``      ``remove`` takes items out (4-bit counters)
``Rebuildable``    rebuilt from a source: build in process, journal, swap (``Filter.rebuild``)
``Mirrorable``     a local copy can answer reads (``prober``: engine/mirror.py)
``Planned``        single operations as plans the asyncio transport runs (async_filter.py)
``FamilyTemplate`` a family's members may use it (engine/kinds/family/)
``ClusterReady``   tested on Redis Cluster: every command names its key's slot
``ExpiringKeys``   some keys carry a TTL (the W001 check warns for volatile-* policies)
``Splittable``     ``oversize``: too big for one Redis string, it becomes another kind
``ServerChecked``  ``check_server``: the server must offer something (a module) to hold it
``ItemBytes``      ``raw_items``: operations may take items' bytes, not digests' positions
``VerifiedByItems`` ``bloom verify`` asks it for every source item (no bitmap of ours)
``Transferable``   exported and imported as parts (``Filter.dump``/``load``: transfer.py)
``Mergeable``      its bits OR: ``Filter.merge`` (a kind that cannot says why: ``merge_refusal``)
=================  =====================================================================
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from django_bloom.conf import get_config
from django_bloom.engine import format as fmt
from django_bloom.engine import hashers, hashing, plans
from django_bloom.engine.kinds.base import Layout
from django_bloom.exceptions import BloomError, DumpInvalid, OperationNotSupported

if TYPE_CHECKING:
    from django_bloom.engine.plans import Plan
    from django_bloom.engine.segment import Segment
    from django_bloom.engine.storage import Storage


def pair_positions(layout: Layout, pairs: Sequence[tuple[int, int]]) -> list[int]:
    """Flat positions of (h1, h2) pairs in ``layout`` (journal replay, late writes)."""
    return hashing.positions_of(pairs, layout.positioner())


class Removable:
    """Items can be taken out."""

    def remove(self, storage: Storage, flat: Sequence[int]) -> list[bool]:
        """Take items out; per item, whether it was (maybe) present (absent: refused)."""
        raise NotImplementedError


class Rebuildable:
    """Rebuilt from a source: the handle builds a bitmap in process (``builder``), takes
    the build lock (``begin_build``), uploads, then ``finish_build`` replays what writers
    journaled meanwhile and swaps it in atomically with the journal's length."""

    def journal(self: Any, storage: Storage, pairs: Sequence[tuple[int, int]]) -> bool:
        """Journal a write's items for a running rebuild; False if none runs any more."""
        return storage.journal(self.control, fmt.pack_journal(pairs))

    def begin_build(self: Any, storage: Storage, token: str) -> bool:
        """Take the build lock and flag the live key(s); False if a rebuild runs."""
        return storage.begin_build(self.control, token)

    def abort_build(self: Any, storage: Storage, token: str) -> None:
        storage.abort_build(self.control, token)

    def builder(self: Any) -> hashing.BitmapBuilder:
        """An in-process bitmap of the new content."""
        return hashing.BitmapBuilder(self.segment.num_bits, self.positioner(), self.position_array)

    def fill_build(
        self: Any,
        storage: Storage,
        hasher: hashers.Hasher,
        items: Iterable[Any],
        encoder: Any = None,
        progress: Callable[[int], None] | None = None,
    ) -> int:
        """Fill the build key(s) with ``items``; the number read. Here: the bitmap built in
        process (numpy-vectorised when available), then uploaded."""
        bitmap, count = hashers.build_bitmap(hasher, items, self.builder(), encoder, progress)
        self.upload_build(storage, bitmap, get_config()["UPLOAD_CHUNK_BYTES"])
        return count

    def upload_build(
        self: Any, storage: Storage, bitmap: bytes | bytearray, chunk_bytes: int
    ) -> None:
        """Write the in-process bitmap (``builder()``'s) to the build key(s)."""
        storage.upload_build(self.segment, bitmap, chunk_bytes)

    def replay_build(self: Any, storage: Storage, flat: Sequence[int]) -> None:
        """Items journaled during a rebuild, written into this (new) layout's build key."""
        storage.set_build_bits(self.segment, flat)

    def finish_build(self: Any, storage: Storage, live: Layout, token: str) -> None:
        """Replay the journal of ``live`` (the layout being replaced) into the build
        key and swap it in, atomically with the journal's length (scripts.SWAP)."""

        def replay(entries: list[bytes]) -> None:
            self.replay_build(storage, pair_positions(self, fmt.unpack_journal(entries)))

        def swap(drained: int) -> int:
            return storage.swap_build(live.segment, self.segment, token, drained)

        replay_and_swap(storage, live.control, replay, swap, self.segment.name)


def replay_and_swap(
    storage: Storage,
    journal: Segment,
    replay: Callable[[list[bytes]], None],
    swap: Callable[[int], int],
    name: str,
) -> None:
    """A rebuild's last step, whatever the kind: ``replay`` into the build key the entries
    writers journaled on ``journal`` since the last read, then ``swap(drained)`` it in,
    atomically with the journal's length: -1 swapped, -2 the lock was lost, else more
    entries came meanwhile (read them, try again)."""
    drained = 0
    while True:
        entries = storage.read_journal(journal, drained)
        if entries:
            replay(entries)
            drained += len(entries)
        outcome = swap(drained)
        if outcome == -1:
            return
        if outcome == -2:
            raise BloomError(f"rebuild of {name!r} lost its lock (took too long?)")


def build_and_swap(
    storage: Storage, live: Any, new: Any, fill: Callable[[], Any], name: str
) -> Any:
    """A rebuild's frame, whatever fills it (items, a dump): the build lock on ``live``,
    ``fill()`` the build key(s) of ``new``, replay and swap; on any error the build is
    given up and the live key stays as it was. Returns what ``fill`` returned."""
    token = uuid.uuid4().hex
    if not live.begin_build(storage, token):
        raise BloomError(f"a rebuild of {name!r} is already running")
    try:
        filled = fill()
        new.finish_build(storage, live, token)
    except BaseException:
        live.abort_build(storage, token)
        raise
    return filled


def refuse_rebuild(layout: Layout) -> None:
    """Raise ``OperationNotSupported`` unless ``layout`` is ``Rebuildable``; the message is
    the kind's ``rebuild_refusal`` (its own reason and remedy) when it has one."""
    if isinstance(layout, Rebuildable):
        return
    name = layout.segment.name
    reason = getattr(layout, "rebuild_refusal", "") or (
        "filter {name!r} (layout {layout!r}) cannot be rebuilt or resized: it keeps no "
        "bitmap a rebuild could swap in. Create a new filter with the size you want and "
        "add the items again."
    )
    raise OperationNotSupported(reason.format(name=name, layout=layout.layout_name))


class Transferable:
    """Exported and imported as parts, each one Redis string (``Filter.dump``/``load``,
    ``bloom export``/``import``: transfer.py). The defaults are bit segments: part ``j`` is
    ``segments[j]``, read range by range and written into a fresh key. A kind that is not
    Transferable may say why in ``transfer_refusal``."""

    def dump_state(self: Any, storage: Storage) -> dict[str, Any]:
        """What the kind keeps beside its parts' bits, read now (``restore_state``)."""
        return {}

    def transfer_parts(self: Any, state: Mapping[str, Any]) -> list[tuple[str, Segment]]:
        """(name, segment) of every part of a filter in ``state``."""
        return [(str(j), segment) for j, segment in enumerate(self.segments)]

    def read_part(
        self: Any, storage: Storage, segment: Segment, chunk_bytes: int
    ) -> Iterator[tuple[int, bytes]]:
        """(position, data) of the part, a chunk at a time (the key checked with each)."""
        for start in range(0, segment.num_bytes, chunk_bytes):
            stop = min(start + chunk_bytes, segment.num_bytes)
            yield start, storage.read_checked(segment, start, stop)

    def write_part(
        self: Any,
        storage: Storage,
        segment: Segment,
        key: str,
        chunks: Iterable[tuple[int, Any]],
        ttl: int | None = None,
    ) -> None:
        """``key`` (a build key, or a new filter's) made anew with the part's chunks;
        DumpInvalid unless they cover ``segment``'s bitmap exactly, in order."""
        storage.prepare_key(segment, key, ttl)
        done, size = [0], segment.num_bytes

        def in_order() -> Iterator[tuple[int, Any]]:
            for position, data in chunks:
                if position != done[0] or done[0] + len(data) > size:
                    raise DumpInvalid(f"the dump's part for {segment.keys.bits!r} is out of order")
                done[0] += len(data)
                yield position, data

        storage.write_ranges(key, in_order(), get_config()["UPLOAD_CHUNK_BYTES"])
        if done[0] != size:
            raise DumpInvalid(f"the dump holds {done[0]:,} of the {size:,} bytes of a part")

    def restore_state(self: Any, storage: Storage, state: Mapping[str, Any]) -> None:
        """A new filter's keys beside its parts (``dump_state``'s), written last."""


class Mergeable(Transferable):
    """Transferable, and its bits OR: ``Filter.merge`` sets in one filter every bit set in
    another of the same kind, geometry and hash key (part by part: ``Storage.or_range``)."""


class Mirrorable:
    """A process-local copy of its one bitmap answers reads (engine/mirror.py)."""

    def prober(self: Any) -> hashing.Prober:
        """``probe(h1, h2, bitmap)`` on a local copy of the segment's bitmap."""
        return hashing.prober_of(self.positioner())


class Planned:
    """Single operations as plans (engine/plans.py: commands + how to read the replies,
    no I/O), so the asyncio transport runs them without a thread. The defaults are the
    bit-per-hash scheme on ``segment`` and apply only while the kind keeps the base
    ``contains`` / ``add``: a subclass that overrides one gets None (no plan; the async
    API runs its method in a worker thread) until it also overrides the plan."""

    def contains_plan(self: Any, flat: Sequence[int]) -> Plan | None:
        if type(self).contains is not Layout.contains:
            return None
        return plans.test_plan(self.segment, flat)

    def add_plan(self: Any, flat: Sequence[int]) -> Plan | None:
        """``add`` as a plan whose result is a ``WriteResult``."""
        if type(self).add is not Layout.add:
            return None
        return plans.set_plan(self.segment, flat)



class FamilyTemplate:
    """A family's members may use this kind: an item is k positions in one segment,
    set by ``add`` and tested by ``contains`` (a plain Bloom filter: check I002 may offer
    RedisBloom's for a big one)."""


class ClusterReady:
    """Tested on Redis Cluster: ``create_filter`` accepts it on a ``CLUSTERS`` alias."""


class ExpiringKeys:
    """Some of its keys carry a TTL, so a ``volatile-*`` maxmemory-policy may evict them."""


class ServerChecked:
    """Only some servers can hold it (``native``: RedisBloom's BF.* commands)."""

    @classmethod
    def check_server(cls, storage: Storage) -> None:
        """Raise (a ``ValueError``) unless the server behind ``storage`` can hold it:
        ``create_filter`` and the admin ask before anything is written."""
        raise NotImplementedError


class ItemBytes:
    """With ``raw_items`` True, ``contains``/``add`` get each item's bytes as ``flat``
    (not its keyed digest's positions): for servers that hash items themselves."""

    raw_items: bool = False


class VerifiedByItems:
    """Its bits are not ours to compare with a rebuilt bitmap: ``bloom verify`` asks it
    for every source item instead (ops/verify.py)."""


class Splittable:
    """Too big for one Redis string, a new filter of this kind becomes another kind."""

    @classmethod
    def oversize(
        cls, num_bits: int, max_segment_bytes: int
    ) -> tuple[str, Mapping[str, Any]] | None:
        """(layout, options) a filter of ``num_bits`` becomes; None: ``create_filter``
        refuses."""
        raise NotImplementedError
