"""The only code that talks to Redis: commands on segments, replies back.

A filter segment is one Redis string (the format: ``engine/format.py``).
The fingerprint is a non-zero hash of (format, m, k, seed, layout; for keyed
filters also the hashing scheme and a MAC naming the key). Every add/contains
reads it *in the same BITFIELD command* as the bits, so a key
that is missing (reads as zeros), truncated, or another layout's is detected
without an extra round trip, and the caller gets ``FilterKeyMissing`` instead
of a false "absent". The write counter changes on every write; local mirrors
poll it to know when to reload. Flag ``REBUILDING`` tells writers that a
rebuild is filling a fresh key and wants their items journaled.

Hot paths build RESP bytes directly (packing.py) and send them through the
connection adapter (connections.EngineConnection): one command, one round trip. Batches are split
into commands of at most ``MAX_BITOPS`` bit operations (whole items only),
pipelined (still one round trip) so Redis never blocks on one giant command.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from redis import exceptions as redis_errors

from django_bloom.engine import scripts
from django_bloom.engine.builds import BuildCommands
from django_bloom.engine.format import FLAG_REBUILDING
from django_bloom.engine.key_commands import KeyCommands
from django_bloom.engine.multisegment import SegmentsCommands
from django_bloom.engine.replies import one_reader, reader
from django_bloom.engine.segment import (  # noqa: F401  (WriteResult: re-exported)
    Segment,
    WriteResult,
    key_missing,
)
from django_bloom.engine.transfers import TransferCommands
from django_bloom.engine.transport.cluster import ClusterConnection, cluster_url
from django_bloom.engine.transport.connections import EngineConnection, read_response
from django_bloom.engine.transport.errors import redis_failure, reply_or_error
from django_bloom.engine.transport.packing import (
    GET_U1,
    MAX_BITOPS,  # noqa: F401  (re-exported)
    SET_U1,
    SET_VALUE,
    Packed,
    bit_ops,
    pack_set,
    pack_test,
    pack_words,
    per_item,
    set_head,
    split_reply,
    stamped_tail,
    test_head,
)
from django_bloom.exceptions import (
    BloomError,
    FilterKeyMissing,
    RedisUnreachable,
    WriteNotReplicated,
)

# Storage runs commands on segments (engine/segment.Segment): key names, size,
# k and fingerprint. Which positions an item has is its layout's business.


class Storage(KeyCommands, BuildCommands, SegmentsCommands, TransferCommands):
    """Redis access for one django-redis cache alias.

    This module holds the connection plumbing and the add/contains hot path;
    the mixins add whole-key commands (key_commands.py), the rebuild protocol
    (builds.py) and several segments in one round trip (multisegment.py)."""

    def __init__(self, alias: str):
        self.alias = alias
        url = cluster_url(alias)  # a DJANGO_BLOOM["CLUSTERS"] name: Redis Cluster (cluster.py)
        self.conn = ClusterConnection(alias, url) if url else EngineConnection(alias)
        self.breaker = self.conn.breaker  # connection failures of this alias (breaker.py)

    # -- plumbing: everything goes through the connection adapter -----------------
    @property
    def client(self):
        return self.conn.client

    def make_connection(self) -> Any:
        """A new, unconnected connection to this alias's server (its settings, the
        engine's timeouts), owned by the caller: the mirror's tracking listener (not
        counted by the pool, which never gets it back)."""
        return self.client.connection_pool.make_connection(counted=False)

    def ping(self) -> None:
        """The circuit breaker's probe: PING, whatever the breaker's state."""
        self.conn.ping()

    def _send(self, payload: bytes, read: Any, durable: bool = False, key: str = "") -> Any:
        """One round trip to the server holding ``key`` (a cluster routes by it)."""
        return self.conn.send(payload, read, durable, key)

    def _replied(
        self, payload: Any, read: Any = read_response, durable: bool = True, key: str = ""
    ) -> tuple[Any, WriteNotReplicated | None]:
        """``_send``, a write's WAIT shortfall handed back with its replies: they decide first
        (a refusal, a moved key, the rebuild flag), then ``WriteResult.reported`` raises it."""
        try:
            return self._send(payload, read, durable, key), None
        except WriteNotReplicated as short:
            return short.replies, short

    def _send_one(self, payload: bytes, key: str = "") -> list[int]:
        """One command whose small reply redis-py's parser (hiredis) reads fastest."""
        answer = self._send(payload, read_response, False, key)
        if isinstance(answer, Exception):
            raise redis_failure(self.alias, answer)
        return answer

    def _call(self, *args: Any) -> Any:
        return self.conn.call(*args)

    def _eval(self, script: str, keys: Sequence[str], args: Sequence[Any]) -> Any:
        return self.conn.eval(script, keys, args)

    def _mapped(self):
        return self.conn.mapped()

    def command(self, *args: Any) -> Any:
        """One plain command (layout lifecycle code: control keys, UNLINK, MEMORY USAGE)."""
        return self._call(*args)

    def answers(self) -> bool:
        """One PING through the breaker: False (counted by it) when Redis does not answer."""
        try:
            self._call("PING")
        except RedisUnreachable:
            return False
        return True

    def _exchange(self, packed: Packed, key: str = "") -> list[tuple[list[int], Any, list[int]]]:
        """Send pre-packed BITFIELD commands (no write: ``_replied``) and read their replies
        (``replies.reader``): one round trip."""
        return self._send(packed.payload, one_reader(packed, False), False, key)

    def exchange_chunks(
        self, packs: Iterable[Packed], durable: bool = False, key: str = ""
    ) -> tuple[list[tuple[Packed, Any]], WriteNotReplicated | None]:
        """``_exchange`` for a batch packed chunk by chunk: each chunk's commands are
        sent as soon as ``packs`` yields them, so Redis runs them while the caller
        hashes and packs the next chunk; then every reply is read (one round trip).

        Returns, per chunk, (its Packed, its replies as ``_exchange`` returns them), and
        the WAIT shortfall of a durable write (``_replied``).
        """
        sent: list[Packed] = []

        def payloads() -> Iterator[bytes]:
            for packed in packs:
                sent.append(packed)
                yield packed.payload

        replies, short = self._replied(payloads(), reader(sent, durable), durable, key)
        return list(zip(sent, replies, strict=True)), short

    def test_chunks(self, layout: Segment, flats: Iterable[Sequence[int]]) -> list[bool]:
        """``test`` for a batch given as chunks of flat positions, made lazily (sent as made)."""
        out: list[bool] = []
        packs = (pack_test(layout, flat) for flat in flats)
        for packed, replies in self.exchange_chunks(packs, key=layout.keys.bits)[0]:
            out += self._read_test(layout, packed, replies)
        return out

    def set_chunks(self, layout: Segment, flats: Iterable[Sequence[int]]) -> WriteResult:
        """``set`` for a batch given as chunks of flat positions (sent as made)."""
        packs = (pack_set(layout, flat) for flat in flats)
        exchanged, short = self.exchange_chunks(packs, True, layout.keys.bits)
        result = WriteResult([], False, short)
        for packed, replies in exchanged:
            self._read_set(layout, packed, replies, result)
        return result

    def _read_test(self, layout: Segment, packed: Packed, replies: Any) -> list[bool]:
        """One pack's ``test`` replies: True per item whose bits are all set; a trailer
        that does not match raises (``_check_trailer``)."""
        out: list[bool] = []
        for (head, bits, _), order in zip(replies, packed.orders, strict=True):
            self._check_trailer(layout, head[0])
            out += per_item(bits, order, layout.num_hashes, want_all=True)
        return out

    def _read_set(self, layout: Segment, packed: Packed, replies: Any, into: WriteResult) -> None:
        """Fold one pack's ``SET`` replies into ``into``; a foreign trailer refuses the write."""
        for (head, bits, _), order in zip(replies, packed.orders, strict=True):
            if head[0] >> 8 != layout.fingerprint:
                self._refuse_write(layout, head[0] >> 8)
            into.rebuilding = into.rebuilding or bool(head[0] & FLAG_REBUILDING)
            into.was_new += per_item(bits, order, layout.num_hashes, want_all=False)

    def run(self, plan: Any) -> Any:
        """Run a plan (engine/plans.py): its commands in one round trip, then its
        reading of the replies. The sync transport of layouts written as plans."""

        def read(conn) -> list[Any]:
            return [conn.read_response() for _ in range(plan.replies)]

        replies, short = self._replied(plan.payload, read, plan.durable)
        try:
            return plan.settle(replies, short)
        except FilterKeyMissing as exc:
            stray = getattr(exc, "stray_key", None)  # plans.StrayKey: a write made a bare key
            if stray:
                self._drop_stray(stray)
            raise

    # -- hot path -----------------------------------------------------------
    def test(self, layout: Segment, flat: Sequence[int]) -> list[bool]:
        """``flat`` holds k positions per item; True per item whose bits are all set."""
        k = layout.num_hashes
        # One item skips the batch machinery (Packed, split, per_item): measured
        # 1.15-1.19x of BF.ADD this way against 0.95-0.98x through the batch path.
        if len(flat) == k and isinstance(flat, list):  # one item: the leanest path
            head = test_head(layout.keys.bits, layout.trailer_offset * 8, k)
            reply = self._send_one(head + bit_ops(GET_U1, flat)[0], key=layout.keys.bits)
            self._check_trailer(layout, reply[0])
            return [0 not in reply[1:]]
        packed = pack_test(layout, flat)
        return self._read_test(layout, packed, self._exchange(packed, key=layout.keys.bits))

    def read_words(self, layout: Segment, words: Sequence[int]) -> list[tuple[list[int], Any]]:
        """The 64-bit words at word indexes ``words`` (``GET i64 #w``), checking the trailer.

        Per command: (the words read, their order as in ``packing.bit_ops``).
        """
        packed = pack_words(layout, words)
        out = []
        replies = self._exchange(packed, key=layout.keys.bits)
        for (head, got, _), order in zip(replies, packed.orders, strict=True):
            self._check_trailer(layout, head[0])
            out.append((got, order))
        return out

    def set(self, layout: Segment, flat: Sequence[int]) -> WriteResult:
        """Set k bits per item; per item, True if any of its bits was clear."""
        k, t_bit, key = layout.num_hashes, layout.trailer_offset * 8, layout.keys.bits
        if len(flat) == k and isinstance(flat, list):  # one item: the leanest path
            body = bit_ops(SET_U1, flat, SET_VALUE)[0]
            reply, short = self._replied(
                set_head(key, t_bit, k) + body + stamped_tail(t_bit), key=key
            )
            if reply[0] >> 8 != layout.fingerprint:
                self._refuse_write(layout, reply[0] >> 8)
            return WriteResult([0 in reply[1:-2]], bool(reply[0] & FLAG_REBUILDING), short)
        packed = pack_set(layout, flat)
        replies, short = self._replied(packed.payload, one_reader(packed, True), True, key)
        result = WriteResult([], False, short)
        self._read_set(layout, packed, replies, result)
        return result

    def test_after(
        self, first: bytes, parts: Sequence[tuple[Segment, Sequence[int]]]
    ) -> tuple[Any, list[list[bool] | None]]:
        """One round trip: the pre-packed command ``first`` (its reply parsed by redis-py),
        then ``test`` on each (segment, flat). Per segment: True per item whose bits are all
        set, or None when its trailer does not match (missing, foreign, resized): the
        caller decides whether that segment had to exist."""
        packs = [pack_test(segment, flat) for segment, flat in parts]

        def read(conn) -> tuple[Any, list[list[Any]]]:
            head = conn.read_response()
            return head, [
                [split_reply(conn.read_response(), h, t) for h, _ops, t in packed.shapes]
                for packed in packs
            ]

        head, replies = self._send(first + b"".join(p.payload for p in packs), read)
        out: list[list[bool] | None] = []
        for (segment, _flat), packed, answers in zip(parts, packs, replies, strict=True):
            found: list[bool] | None = []
            for (fp, bits, _), order in zip(answers, packed.orders, strict=True):
                if fp[0] != segment.fingerprint:
                    found = None
                    break
                found += per_item(bits, order, segment.num_hashes, want_all=True)
            out.append(found)
        return head, out

    def send_commands(
        self, payloads: Sequence[bytes], durable: bool = False
    ) -> tuple[list[Any], WriteNotReplicated | None]:
        """Send every pre-packed command, then read one reply each, error replies
        returned as values, not raised: one round trip (the kinds' own commands).

        With ``durable`` and WRITE_REPLICAS, a WAIT follows in the same round trip; when
        too few replicas acknowledged, the replies come back WITH the WriteNotReplicated
        (the caller decides: a command that failed with NOSCRIPT wrote nothing to
        replicate)."""

        def read(conn: Any) -> list[Any]:
            return [reply_or_error(conn) for _ in payloads]

        return self._replied(b"".join(payloads), read, durable)

    def run_scripts(
        self, script: str, payloads: Sequence[bytes], durable: bool = False
    ) -> tuple[list[Any], WriteNotReplicated | None]:
        """``send_commands`` for pre-packed ``EVALSHA`` calls of ``script`` (the kinds'
        scripts). A server that lost its script cache (a restart, SCRIPT FLUSH) answers
        NOSCRIPT and runs nothing: the script is loaded and only those calls are sent
        again. A call that ran nothing has no WAIT verdict of its own."""
        replies, unreplicated = self.send_commands(payloads, durable)
        stale = [i for i, r in enumerate(replies) if isinstance(r, redis_errors.NoScriptError)]
        if not stale:
            return replies, unreplicated
        if len(stale) == len(replies):
            unreplicated = None
        self.command("SCRIPT", "LOAD", script)
        retried, again = self.send_commands([payloads[i] for i in stale], durable)
        for i, reply in zip(stale, retried, strict=True):
            replies[i] = reply
        return replies, unreplicated or again

    def sent_replies(self, payloads: Sequence[bytes]) -> list:
        """``send_commands`` (no WAIT) for callers that take no error reply (``raise_errors``).
        A write reads its replies, then reports its WAIT shortfall: ``send_commands``."""
        return self.raise_errors(self.send_commands(payloads)[0])

    def raise_errors(self, replies: list) -> list:
        """``replies``, once none is an error reply (the first raised as the engine's error)."""
        for reply in replies:
            if isinstance(reply, Exception):
                raise redis_failure(self.alias, reply)
        return replies

    @staticmethod
    def _check_trailer(layout: Segment, fingerprint: int) -> None:
        if fingerprint != layout.fingerprint:
            raise key_missing(layout)

    def _refuse_write(self, layout: Segment, fingerprint: int) -> None:
        """A write found no valid trailer. Fingerprint 0: the write has just created
        (or grown) a key that is nobody's (a lost key, or a retired generation's
        name): remove it in the same breath (the error path's one extra round
        trip). Then raise as a read would."""
        if fingerprint == 0:
            self._drop_stray(layout.keys.bits)
        raise key_missing(layout)

    def _drop_stray(self, key: str) -> None:
        try:
            self._eval(scripts.DROP_STRAY, [key], [])
        except BloomError:  # the key stays invalid (fingerprint 0): never "healthy"
            pass
