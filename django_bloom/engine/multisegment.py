"""Several segments in one round trip: the commands of sharded layouts.

A mixin of ``engine/storage.Storage`` (it uses the storage's ``conn``,
``_replied``, ``_check_trailer`` and ``_refuse_write``): a batch whose items
fall in several segments is sent as one exchange, the commands for one server
concatenated on one connection, every server's written before any reply is read.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django_bloom.engine.format import FLAG_REBUILDING
from django_bloom.engine.replies import merge_packs, one_reader
from django_bloom.engine.segment import Segment, WriteResult
from django_bloom.engine.transport.errors import Redirect
from django_bloom.engine.transport.packing import Packed, pack_set, pack_test, per_item
from django_bloom.exceptions import FilterKeyMissing, WriteNotReplicated


class SegmentsCommands:
    """``test``/``set`` on several segments at once (mixed into Storage)."""

    # A part: (segment, its items' positions in it, those items' indexes in the batch).
    # A part: (segment, its items' positions in it, those items' indexes in the batch).
    def test_segments(
        self, parts: Sequence[tuple[Segment, Sequence[int], Sequence[int]]], count: int
    ) -> list[bool]:
        """``test`` on several segments at once; per item of the batch (``count`` items)."""
        packs = [(segment, pack_test(segment, flat)) for segment, flat, _items in parts]
        out = [False] * count
        replied = self._exchange_segments(packs)[0]
        for (segment, packed), replies, part in zip(packs, replied, parts, strict=True):
            answers = self._read_test(segment, packed, replies)
            for index, answer in zip(part[2], answers, strict=True):
                out[index] = answer
        return out

    def set_segments(
        self, parts: Sequence[tuple[Segment, Sequence[int], Sequence[int]]], count: int
    ) -> WriteResult:
        """``set`` on several segments at once: every segment's write is sent (and
        applied) even when another's key is missing; then FilterKeyMissing."""
        packs = [(segment, pack_set(segment, flat)) for segment, flat, _items in parts]
        replied, short = self._exchange_segments(packs, durable=True)
        was_new, rebuilding, missing = [False] * count, False, []
        for (segment, packed), replies, part in zip(packs, replied, parts, strict=True):
            answers: list[bool] = []
            for (head, bits, _), order in zip(replies, packed.orders, strict=True):
                if head[0] >> 8 != segment.fingerprint:
                    missing.append((segment, head[0] >> 8))
                rebuilding = rebuilding or bool(head[0] & FLAG_REBUILDING)
                answers += per_item(bits, order, segment.num_hashes, want_all=False)
            for index, answer in zip(part[2], answers, strict=True):
                was_new[index] = answer
        if missing:
            for segment, fingerprint in missing[1:]:
                try:
                    self._refuse_write(segment, fingerprint)  # drops a stray, then raises
                except FilterKeyMissing:
                    pass
            self._refuse_write(*missing[0])
        return WriteResult(was_new, rebuilding, short)

    def _exchange_segments(
        self, jobs: Sequence[tuple[Segment, Packed]], durable: bool = False, retried: bool = False
    ) -> tuple[list[list[tuple[list[int], Any, list[int]]]], WriteNotReplicated | None]:
        """Several segments' commands, one round trip: the commands for one server are
        concatenated on one connection, every server's are written before any reply
        is read (connections.EngineConnection.send_groups). Per job, its replies; and
        a durable write's WAIT shortfall (``Storage._replied``).

        On a cluster, a group whose slot moved is retried by the connection; if that
        fails again (the group now spans nodes), the whole exchange is regrouped on
        the fresh slot map and sent once more (bits are idempotent; was-new of items
        already written then reads False: only while slots migrate)."""
        if len(jobs) == 1:
            segment, packed = jobs[0]
            read = one_reader(packed, durable)
            replies, short = self._replied(packed.payload, read, durable, segment.keys.bits)
            return [replies], short
        groups: dict[Any, list[int]] = {}
        for index, (segment, _packed) in enumerate(jobs):
            groups.setdefault(self.conn.route(segment.keys.bits), []).append(index)
        sends = []
        for target, indexes in groups.items():
            merged = merge_packs([jobs[i][1] for i in indexes])
            sends.append((target, merged.payload, one_reader(merged, durable)))
        out: list[Any] = [None] * len(jobs)
        try:
            replied, short = self.conn.send_groups(sends, durable), None
        except WriteNotReplicated as exc:  # applied: read as any (one send: its own replies)
            replied, short = [exc.replies] if len(sends) == 1 else exc.replies, exc
        except Redirect as redirect:
            if retried:  # a slot moved twice in one call: let the caller see it
                raise
            if redirect.ask:  # a slot migrating: one segment at a time, each after ASKING
                sent = [self._exchange_segments([job], durable) for job in jobs]
                return [r[0][0] for r in sent], next((s for _, s in sent if s), None)
            self.conn.refresh(force=True)  # the slot map, re-read: the groups change
            return self._exchange_segments(jobs, durable, retried=True)
        for indexes, replies in zip(groups.values(), replied, strict=True):
            start = 0
            for i in indexes:
                count = len(jobs[i][1].shapes)
                out[i] = replies[start : start + count]
                start += count
        return out, short
