"""Export, import and merge on the handle: ``dump``, ``load``, ``is_compatible``, ``merge``
(a mixin of ``Filter`` and ``Family``; a new filter from a dump: ``loading.py``). The
format: ``engine/dumpfile.py``; what each kind moves: ``Transferable`` (its parts);
docs/transfer.md.

- ``dump`` reads every part range by range (the key checked with each range) and yields
  the records: memory stays at one chunk whatever the filter's size.
- ``load`` replaces an existing filter's bits through the rebuild's protocol
  (``build_and_swap``): the parts go to build keys while adds made meanwhile are journaled,
  then replayed, then one swap. A dump that is cut short, corrupt (a checksum fails) or
  not this filter's (``mismatch``) aborts the build: the live key is as it was.
- ``merge`` ORs other filters' bits in, part by part, each range atomically
  (``Storage.or_range``): adds made meanwhile are kept, and a merge cut short leaves a
  filter that holds more, never less.
"""

from __future__ import annotations

import dataclasses
import io
from collections.abc import Callable, Iterator
from itertools import chain, groupby
from operator import itemgetter
from typing import Any

from django.utils import timezone

from django_bloom import capacity, counters
from django_bloom.engine import dumpfile
from django_bloom.engine.builds import BUILD_TTL_SECONDS
from django_bloom.engine.dumpfile import DumpReader
from django_bloom.engine.kinds.capabilities import (
    Mergeable,
    Rebuildable,
    Transferable,
    build_and_swap,
)
from django_bloom.exceptions import (
    BloomError,
    DumpInvalid,
    FilterKeyMissing,
    IncompatibleFilters,
    OperationNotSupported,
)
from django_bloom.models import BloomFilter
from django_bloom.registry import fingerprint, forget_filters, layout_for

DUMP_CHUNK_BYTES = 4 * 1024 * 1024  # bytes a dump's chunk holds (the format allows 10 MiB)
MERGE_CHUNK_BYTES = 1024 * 1024  # bytes one OR script takes: Redis is never blocked long
# The row as a dump carries it; the fields from "layout" to "family" must agree for two
# filters' bits to mean the same items (with the seed and hash key, or the fingerprint).
ROW = (
    "kind", "layout", "capacity", "error_rate", "num_bits", "num_hashes", "options",
    "format_version", "normalizer", "encoder", "family", "member_ttl", "source", "description",
)  # fmt: skip
SAME = ROW[1:11]
Progress = Callable[[int, Any], None]


def header_of(meta: BloomFilter, include_key: bool = True) -> dict[str, Any]:
    """What a dump says of its filter's row (no seed or key unless ``include_key``)."""
    header = {field: getattr(meta, field) for field in ROW}
    header.update(
        name=meta.name,
        fingerprint=fingerprint(meta),
        seed=meta.seed if include_key else None,
        hasher=meta.hasher if include_key else meta.hasher.partition("$")[0],
    )
    return header


def mismatch(meta: BloomFilter, header: dict[str, Any]) -> str:
    """Why bits described by ``header`` would mean other items in ``meta``'s filter ("":
    they would not). A dump without its key matches its own filter's fingerprint only."""
    for field in SAME:
        if header.get(field) != getattr(meta, field):
            return f"{field} is {header.get(field)!r}, the filter's {getattr(meta, field)!r}"
    if header.get("seed") is None:
        if header.get("fingerprint") != fingerprint(meta):
            return "fingerprint is another filter's (a dump without its hash key loads only "
            "into the filter it came from)"
    elif (header["seed"], header["hasher"]) != (meta.seed, meta.hasher):
        return "hash key (and seed) are another filter's"
    return ""


def reader_of(source: Any, progress: Progress | None = None) -> DumpReader:
    """A dump's reader from a binary file, bytes, or a reader already open."""
    if isinstance(source, DumpReader):
        return source
    stream = io.BytesIO(source) if isinstance(source, (bytes, bytearray)) else source
    return DumpReader(stream, progress)


class TransferAccess:
    """``dump``, ``load``, ``is_compatible`` and ``merge`` (mixed into ``Filter`` and
    ``Family``): needs ``meta``, ``name``, ``storage`` and ``layout``. A family overrides
    the hooks below (its parts are its members)."""

    _vanishing = False  # parts may go while a dump reads them (a family's expiring members)

    def _refuse(self, what: str, reason: str) -> OperationNotSupported:
        name = self.name
        return OperationNotSupported(f"filter {name!r} cannot be {what}: {reason}")

    def _transferable(self) -> Any:
        if self.meta.family and not self._vanishing:  # a member's handle, not its family's
            raise self._refuse(
                "exported or imported member by member", "a family moves whole (get_family())"
            )
        if not isinstance(self.layout, Transferable):
            reason = getattr(self.layout, "transfer_refusal", "") or (
                "filter {name!r} (layout {layout!r}) is not exported or imported"
            )
            raise OperationNotSupported(reason.format(name=self.name, layout=self.meta.layout))
        return self.layout

    # -- hooks: a filter's parts are its layout's (a family's: its members) -------------
    def _dump_parts(self, layout: Any, state: dict) -> Any:
        return layout.transfer_parts(state)

    def _part_segment(self, layout: Any, state: dict, name: str) -> Any:
        return dict(layout.transfer_parts(state))[name]

    def _part_ttl(self) -> int | None:
        return None

    def _restore(self, layout: Any, state: dict) -> None:
        layout.restore_state(self.storage, state)

    # -- export -----------------------------------------------------------------------
    def dump(
        self,
        *,
        include_key: bool = True,
        chunk_bytes: int = DUMP_CHUNK_BYTES,
        progress: Progress | None = None,
    ) -> Iterator[bytes]:
        """This filter as a dump: pieces of bytes to write one after another (a file, a
        download). It holds the row and the hash key (whoever has it can aim items at the
        filter's bits); ``include_key=False`` leaves the key and seed out, and the dump
        then loads only into this filter's row (matched by fingerprint).
        ``progress(bytes done, bytes in all or None)``."""
        layout = self._transferable()
        if not 0 < chunk_bytes <= dumpfile.MAX_CHUNK_BYTES:
            raise ValueError(f"chunk_bytes is 1 to {dumpfile.MAX_CHUNK_BYTES:,}")
        state = layout.dump_state(self.storage)
        parts = self._dump_parts(layout, state)
        total = sum(s.num_bytes for _, s in parts) if isinstance(parts, list) else None
        header = header_of(self.meta, include_key)
        header.update(items_added=counters.items_added(self), state=state, bytes=total)
        yield from dumpfile.header_record({**header, "exported_at": timezone.now().isoformat()})
        count = done = 0
        for name, segment in parts:
            chunks = layout.read_part(self.storage, segment, chunk_bytes)
            try:
                first = next(chunks)
            except FilterKeyMissing:
                if self._vanishing:  # expired since it was listed: absent, as it reads
                    continue
                raise
            for position, data in chain([first], chunks):
                yield from dumpfile.chunk_record(name, position, data)
                count, done = count + 1, done + len(data)
                if progress is not None:
                    progress(done, total)
        yield from dumpfile.end_record(count)

    # -- import -----------------------------------------------------------------------
    def load(self, source: Any, progress: Progress | None = None) -> int:
        """Replace this filter's bits with a dump's (a binary file, bytes), atomically:
        the rebuild's protocol (adds made meanwhile are kept). IncompatibleFilters (the
        dump is another filter's), DumpInvalid (cut short, corrupt): nothing changes.
        Returns the dump's items_added."""
        reader = reader_of(source, progress)
        self._transferable()
        current = BloomFilter.objects.get(pk=self.meta.pk)
        problem = mismatch(current, reader.header)
        if problem:
            raise IncompatibleFilters(
                f"the dump of {reader.header.get('name')!r} does not fit filter "
                f"{current.name!r}: its {problem}. Import it under a new name instead"
            )
        live = layout_for(current)
        if current.family or not isinstance(live, Rebuildable):
            raise self._refuse(
                "replaced by a dump",
                f"a {current.layout!r}{' family' if current.family else ''} has no rebuild to "
                "swap new bits in while it is written to. Delete it and import the dump "
                "again, or import it under another name",
            )

        build_and_swap(
            self.storage, live, live, lambda: self._write_parts(live, reader, True), self.name
        )
        return self._loaded(reader.header)

    def _write_parts(self, layout: Any, reader: DumpReader, build: bool) -> None:
        """Every part of the dump into its key (the build key, or a new filter's); a part
        the filter lacks, one twice, or (but in a family) one missing is DumpInvalid."""
        state, seen = reader.header.get("state") or {}, set()
        ttl = BUILD_TTL_SECONDS if build else self._part_ttl()
        for name, chunks in groupby(reader.chunks(), key=itemgetter(0)):
            try:
                segment = None if name in seen else self._part_segment(layout, state, name)
            except (BloomError, LookupError, ValueError, TypeError):
                segment = None
            if segment is None:
                raise DumpInvalid(f"the dump's part {name!r} is not one of {self.name!r}'s")
            seen.add(name)
            key = segment.keys.build if build else segment.keys.bits
            layout.write_part(self.storage, segment, key, (c[1:] for c in chunks), ttl)
        missing = set() if self._vanishing else {n for n, _ in layout.transfer_parts(state)}
        if missing - seen:
            raise DumpInvalid(f"the dump lacks part(s) {', '.join(sorted(missing - seen))}")

    def write_dump(self, reader: DumpReader) -> None:
        """A new filter's keys from a dump, before its row is saved (``loading.py``)."""
        layout = self._transferable()
        self._write_parts(layout, reader, False)
        try:
            self._restore(layout, reader.header.get("state") or {})
        except (KeyError, ValueError, TypeError) as exc:
            raise DumpInvalid(f"the dump's state does not fit: {exc!r}") from None
        self._loaded(reader.header)

    def _loaded(self, header: dict[str, Any]) -> int:
        added = int(header.get("items_added") or 0)
        counters.set_added(self, added)
        forget_filters(self.name)
        return added

    # -- merge ------------------------------------------------------------------------
    def is_compatible(self, other: Any) -> bool:
        """Whether ``other``'s bits mean the same items here: the same kind, geometry,
        options, normaliser and hash key (one of them made from the other's dump)."""
        return isinstance(other, TransferAccess) and not mismatch(self.meta, header_of(other.meta))

    def merge(self, *others: Any) -> Any:
        """OR the bits of ``others`` into this filter: it then answers "maybe" for every
        item any of them holds. Refused, with nothing written, for a kind that cannot merge
        (``merge_refusal``) or a filter that is not ``is_compatible``; adds made meanwhile
        are kept. ``items_added`` becomes the merged bits' estimate (the capacity warning
        reads it). Returns the merged filter's ``stats()``."""
        layout = self.layout
        if self.meta.family:
            raise self._refuse("merged", "filter families are not merged")
        if not isinstance(layout, Mergeable):
            reason = getattr(layout, "merge_refusal", "") or "its kind does not merge"
            raise self._refuse("merged", reason)
        for other in others:
            problem = mismatch(self.meta, header_of(other.meta))
            problem = (
                "it is this filter" if other.layout == layout else problem and "its " + problem
            )
            if problem:
                raise IncompatibleFilters(
                    f"{other.name!r} cannot be merged into {self.name!r}: {problem}"
                )
        if self.build_running():
            raise BloomError(f"a rebuild or an import of {self.name!r} runs: merge after it")
        targets = dict(layout.transfer_parts({}))
        for other in others:
            for name, segment in other.layout.transfer_parts({}):
                for start, data in other.layout.read_part(
                    other.storage, segment, MERGE_CHUNK_BYTES
                ):
                    self.storage.or_range(targets[name], start, data)
        stats = self.stats()
        estimate = round(min(stats.estimated_items, 2**62))  # inf: every bit set
        counters.set_added(self, estimate)
        if self._bound.watch and estimate > self.meta.capacity:
            capacity.past_capacity(self.meta, estimate)
        return dataclasses.replace(stats, items_added=estimate)
