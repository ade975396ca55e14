"""``bloom verify``: find (and repair) bits a bound filter's source needs but Redis lacks.

Bitmap bytes zeroed in place (the key's length and trailer kept) turn into
silent false "absent" answers: the fingerprint check cannot see them. For a
filter bound to a source (a model field, or a blocklist's ``BlockedEntry``
rows), the bitmap the source calls for is built in this process, as a rebuild
would, and compared with Redis chunk by chunk: one GETRANGE of at most
``chunk_bytes`` per round trip (the key's length and fingerprint checked with it), with a
pause between chunks, so it is safe to run from cron on a live site.

Only bits the source sets and Redis lacks are reported; extra bits in Redis
(items added outside the source, deleted rows) are normal for a Bloom filter.
``repair=True`` ORs exactly the missing bits into each chunk that lacks some, one script
per chunk (``Storage.or_range``, what a merge runs): it never clears a bit, so
concurrent writers lose nothing.
The source is read before Redis, so rows committed during the scan cannot be
reported missing (their on-commit add ran before Redis is read).
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from itertools import islice
from typing import Any

from django_bloom.engine.hashers import chunked
from django_bloom.engine.kinds.capabilities import Removable, VerifiedByItems
from django_bloom.exceptions import BloomError, OperationNotSupported
from django_bloom.services import Filter, get_filter
from django_bloom.unique.sync import source_items

CHUNK_BYTES = 1024 * 1024  # bitmap bytes per GETRANGE
PAUSE_SECONDS = 0.01  # between two round trips
SHOWN_OFFSETS = 10
_NONZERO = re.compile(rb"[^\x00]")


@dataclass
class VerifyReport:
    name: str
    items: int  # source items read
    bits_needed: int  # bits the source sets
    bits_missing: int  # of those, bits Redis lacks
    first_offsets: list[int] = field(default_factory=list)  # bitmap byte offsets
    items_affected: int = 0  # source items with at least one missing bit
    bits_repaired: int = 0
    round_trips: int = 0
    # "items": a layout without a bitmap of ours (native): each source item asked instead.
    compared: str = "bits"
    items_repaired: int = 0

    @property
    def ok(self) -> bool:
        return self.bits_missing == 0 and self.items_affected == 0


def verify_filter(
    name: str | Filter,
    *,
    repair: bool = False,
    chunk_bytes: int = CHUNK_BYTES,
    pause: float = PAUSE_SECONDS,
) -> VerifyReport:
    """Compare a bound filter with its source; with ``repair``, set the bits Redis lacks.

    Raises ``ValueError`` for a filter with no source, ``FilterKeyMissing``
    when the key is gone or resized meanwhile (rebuild it), ``BloomError``
    while a rebuild runs.
    """
    handle = name if isinstance(name, Filter) else get_filter(name, refresh=True)
    meta = handle.meta
    if not meta.is_bound:
        raise ValueError(
            f"filter {meta.name!r} has no bound source (app_label.Model.field) to verify "
            "against: verify compares Redis with the rows the filter is built from"
        )
    by_items = isinstance(handle.layout, VerifiedByItems)
    if not by_items and isinstance(handle.layout, Removable):  # 4-bit counters, not bits
        raise OperationNotSupported(
            f"filter {meta.name!r} keeps counters, not bits: verify compares bitmaps. "
            f"Rebuild it from its source instead: manage.py bloom rebuild {meta.name}"
        )
    if handle.build_running():
        raise BloomError(f"a rebuild of {meta.name!r} is running: verify it afterwards")
    if by_items:
        return _verify_items(handle, repair, pause)
    handle.live_fingerprint()  # a key that is there (each read checks it again)
    items, _total = source_items(meta)
    wanted, count = handle.build_bitmap(items)
    report = VerifyReport(meta.name, count, 0, 0)
    missing = bytearray(handle.bitmap_bytes)  # the bits the source needs and Redis lacks
    base, layout = 0, handle.layout  # a sharded filter's bitmap: its segments' in a row
    for segment in layout.segments:
        for start, have in layout.read_part(handle.storage, segment, chunk_bytes):
            at, report.round_trips = base + start, report.round_trips + 1
            need = int.from_bytes(wanted[at : at + len(have)], "big")
            lack = need & ~int.from_bytes(have, "big")
            report.bits_needed += need.bit_count()
            if lack:
                report.bits_missing += lack.bit_count()
                lacking = lack.to_bytes(len(have), "big")
                missing[at : at + len(have)] = lacking
                shown, hits = report.first_offsets, _NONZERO.finditer(lacking)
                shown += [at + hit.start() for hit in islice(hits, SHOWN_OFFSETS - len(shown))]
                if repair:
                    handle.storage.or_range(segment, start, lacking)
                    report.bits_repaired += lack.bit_count()
                    report.round_trips += 1
            time.sleep(pause)
        base += segment.num_bytes
    if report.bits_missing:
        items, _total = source_items(meta)  # a second pass, only when something is missing
        report.items_affected = _affected(handle, items, missing)
    return report


def _affected(handle: Filter, items: Iterable[Any], missing: bytearray) -> int:
    return sum(
        any(missing[g >> 3] & (0x80 >> (g & 7)) for g in positions)
        for positions in handle.item_positions(items)
    )


VERIFY_ITEMS = 10_000  # source items asked per round trip (a layout verified by items)


def _verify_items(handle: Filter, repair: bool, pause: float) -> VerifyReport:
    """Ask the filter for every source item (``contains_many``): those it answers
    "absent" for are reported (and with ``repair`` added again). For layouts whose bits
    are not ours to read (native: RedisBloom's), so this is the check that counts."""
    items, _total = source_items(handle.meta)
    report = VerifyReport(handle.meta.name, 0, 0, 0, compared="items")
    for chunk in chunked(items, VERIFY_ITEMS):
        answers = handle.contains_many(chunk)
        lacking = [item for item, hit in zip(chunk, answers, strict=True) if not hit]
        report.items += len(chunk)
        report.round_trips += 1
        report.items_affected += len(lacking)
        if lacking and repair:
            handle.add_many(lacking)
            report.items_repaired += len(lacking)
            report.round_trips += 1
        time.sleep(pause)
    return report
