"""``Family``: a handle on a filter family row ("articles pushed to user N").

``get_filter(name, member=...)`` returns a member's ``Filter`` (its own key, created by
its first write, optional TTL); ``get_family(name)`` returns this object for the
family-wide operations: delete (every member key), clear (every member key; the family
stays), stats (member count, memory, the fullest sampled member's fill: bounded cost).
Key names and scripts: ``engine/kinds/family/layout.py`` and ``engine/kinds/family/commands.py``.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from typing import Any

from django_bloom import counters
from django_bloom.engine.kinds.family import commands as family_ops
from django_bloom.engine.kinds.family import layout as family
from django_bloom.engine.segment import Segment
from django_bloom.engine.sizing import estimate_items, fill_fpr
from django_bloom.engine.storage import Storage
from django_bloom.filter import Filter
from django_bloom.models import BloomFilter
from django_bloom.registry import forget_filters, layout_for, refuse_clear
from django_bloom.transfer import TransferAccess

# Member handles kept per family and process (least recently used go first):
# a site may touch thousands of members, and a handle is cheap to rebuild.
MAX_MEMBER_HANDLES = 1024


@dataclass(frozen=True)
class FamilyStats:
    name: str
    capacity: int  # per member
    error_rate: float
    num_bits: int  # per member
    num_hashes: int
    member_ttl: int | None
    members: int  # member keys found (a lower bound when not members_complete)
    members_complete: bool
    memory_bytes: int | None  # estimated from a sample (memory_sampled members)
    memory_sampled: int
    key_bytes: int  # bytes one member's key holds (bitmap and trailer)
    items_added: int  # reported new by add() over all members (app count)
    control_present: bool  # False: the family's Redis data is lost
    # The fullest member of the memory sample: its estimated items / capacity, fraction of
    # bits set and false-positive rate (what health() and Prometheus use); None: no member.
    capacity_used: float | None
    fill_ratio: float | None
    current_fpr: float | None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


class Family(TransferAccess):
    """A filter family: one row, many member filters. Get one with ``get_family(name)``.
    ``dump()`` exports it whole (a part per member); a new family loads from a dump."""

    _vanishing = True  # members expire while a dump reads them: left out, absent as they read

    def __init__(self, meta: BloomFilter):
        self.meta = meta
        self.name = meta.name
        self.storage = Storage(meta.cache_alias)
        self.layout = layout_for(meta)  # the row's own segment: counters, key prefix
        prefix = self.layout.segment.prefix
        self.control_key = family.control_key(prefix, meta.name)
        self.pattern = family.members_pattern(prefix, meta.name)
        self._handles: OrderedDict[str, Filter] = OrderedDict()
        self._lock = threading.Lock()

    @property
    def counters_segment(self) -> Segment:
        """Where the family's counters live (its members' handles count here too)."""
        return self.layout.control

    def __repr__(self) -> str:
        m = self.meta
        return f"<Family {m.name!r} n={m.capacity} p={m.error_rate} ttl={m.member_ttl}>"

    # -- members ---------------------------------------------------------------
    def member(self, member: str | int, encoder: Callable | None = None) -> Filter:
        """The ``Filter`` of one member (validated: TypeError/ValueError, nothing written)."""
        token = family.member_token(member)
        if encoder is not None:
            return Filter(self.meta, encoder, member)
        with self._lock:
            handle = self._handles.get(token)
            if handle is not None:
                self._handles.move_to_end(token)
                return handle
        handle = Filter(self.meta, None, member)
        with self._lock:
            self._handles[token] = handle
            while len(self._handles) > MAX_MEMBER_HANDLES:
                self._handles.popitem(last=False)
        return handle

    def members(self) -> Iterator[str]:
        """Every member that has a key now (SCAN: walks the whole keyspace in steps)."""
        with self.storage._mapped():
            for key in self.storage.client.scan_iter(match=self.pattern, count=1000):
                yield family.member_of_token(
                    family.token_of_key(key, self.layout.segment.prefix, self.name)
                )

    def stats_control_present(self) -> bool:
        """Whether the family's control key exists (one EXISTS)."""
        return family_ops.control_exists(self.storage, self.control_key)

    # -- export and import (transfer.py's hooks): a part per member, the control key last --
    def _dump_parts(self, layout: Any, state: dict) -> Iterator[tuple[str, Segment]]:
        seen: set[str] = set()
        for member in self.members():
            token = family.member_token(member)
            if token not in seen:  # SCAN may name a key twice
                seen.add(token)
                yield token, family.member_segment(layout.segment, token)

    def _part_segment(self, layout: Any, state: dict, name: str) -> Segment:
        if family.member_token(family.member_of_token(name)) != name:
            raise ValueError(name)  # not a member's key name
        return family.member_segment(layout.segment, name)

    def _part_ttl(self) -> int | None:
        return self.meta.member_ttl

    def _restore(self, layout: Any, state: dict) -> None:
        self.create_keys()

    # -- lifecycle -------------------------------------------------------------
    def create_keys(self) -> None:
        """The control key: created with the row, never expires; its value names the
        row's generation, which every member operation checks (a handle made before a
        delete and re-create raises)."""
        family_ops.create_control(
            self.storage, self.control_key, family_ops.control_value(self.layout.segment)
        )

    def delete(self) -> int:
        """Delete the control key, every member key (SCAN + UNLINK in batches of 1000)
        and the row. Returns the number of member keys removed."""
        keys = self.layout.segment.keys
        removed = family_ops.delete_family(
            self.storage,
            self.control_key,
            self.pattern,
            [keys.bits, keys.build, keys.journal, keys.lock, keys.counters],
        )
        BloomFilter.objects.filter(pk=self.meta.pk).delete()
        forget_filters(self.name)
        return removed

    def clear(self) -> int:
        """Empty every member: their keys go (each then reads "absent" until written).
        The family and its control key stay. Returns the number of keys removed."""
        current = BloomFilter.objects.get(pk=self.meta.pk)
        refuse_clear(current)
        removed = self.storage.unlink_matching(self.pattern)
        counters.set_added(self, 0)
        return removed

    def stats(self) -> FamilyStats:
        """Member count (SCAN, at most ``family_ops.STATS_MAX_SCANS`` calls); memory and fill
        of up to ``family_ops.MEMORY_SAMPLES`` random members (mean x count; the fullest's)."""
        meta, segment = self.meta, self.layout.segment
        figures = family_ops.family_figures(
            self.storage, self.control_key, self.pattern, segment.num_bytes
        )
        m, k, bits = segment.num_bits, segment.num_hashes, figures.fullest_bits
        return FamilyStats(
            name=meta.name,
            capacity=meta.capacity,
            error_rate=meta.error_rate,
            num_bits=meta.num_bits,
            num_hashes=meta.num_hashes,
            member_ttl=meta.member_ttl,
            members=figures.members,
            members_complete=figures.complete,
            memory_bytes=figures.memory_bytes,
            memory_sampled=figures.sampled,
            key_bytes=self.layout.key_bytes,
            items_added=counters.items_added(self),
            control_present=figures.control_present,
            capacity_used=None if bits is None else estimate_items(m, k, bits) / meta.capacity,
            fill_ratio=None if bits is None else bits / m,
            current_fpr=None if bits is None else fill_fpr(m, bits, k),
        )
