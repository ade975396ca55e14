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

from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from redis.connection import AbstractConnection

from django_bloom.engine import scripts
from django_bloom.engine.format import FLAG_REBUILDING, TRAILER, TRAILER_BYTES, fingerprint_bytes
from django_bloom.engine.segment import (  # noqa: F401  (WriteResult: re-exported)
    Segment,
    WriteResult,
    key_missing,
)
from django_bloom.engine.transport.breaker import guarded
from django_bloom.engine.transport.cluster import ClusterConnection, Redirect, cluster_url
from django_bloom.engine.transport.connections import (
    EngineConnection,
    read_response,
    redis_failure,  # noqa: F401  (re-exported: the one error mapping)
    slow,
)
from django_bloom.engine.transport.packing import (
    GET_U1,
    MAX_BITOPS,  # noqa: F401  (re-exported)
    RAW_READ_MIN_OPS,
    SET_U1,
    SET_VALUE,
    Packed,
    ReplyReader,
    bit_ops,
    header,
    item_chunks,
    pack_set,
    pack_test,
    pack_words,
    per_item,
    set_head,
    set_tail,
    split_reply,
    test_head,
)
from django_bloom.exceptions import BloomError, FilterKeyMissing, RedisRefused, RedisUnreachable

BUILD_TTL_SECONDS = 3600


def _reader(packs: list[Packed], durable: bool) -> Callable[[Any], list[Any]]:
    """``read(conn)``: the replies of every command of ``packs`` (filled by the time it runs).

    Large bit replies are read straight from the socket (packing.ReplyReader)
    on redis-py's own TCP/TLS/Unix connections. Small ones, word replies,
    and other connection classes (a client-side caching proxy, a custom
    class) go through redis-py's parser (hiredis), and so do durable writes
    (the WAIT reply that follows must stay in redis-py's buffer).
    """

    def read(conn: Any) -> list[list[tuple[list[int], Any, list[int]]]]:
        # One reader for the whole exchange: ReplyReader buffers what it reads,
        # so it is never mixed with redis-py's parser on the same replies.
        first = packs[0] if packs else None
        sock = getattr(conn, "_sock", None)
        if (
            first is not None
            and not first.words
            and not durable
            and sum(ops for _h, ops, _t in first.shapes) >= RAW_READ_MIN_OPS
            and sock is not None
            and isinstance(conn, AbstractConnection)
        ):
            reader = ReplyReader(sock)
            return [[reader.bitfield(*shape) for shape in packed.shapes] for packed in packs]
        return [
            [
                split_reply(conn.read_response(), head, tail, as_bits=not packed.words)
                for head, _ops, tail in packed.shapes
            ]
            for packed in packs
        ]

    return read


# Storage runs commands on segments (engine.layouts.Segment): key names, size,
# k and fingerprint. Which positions an item has is its layout's business.


_key_missing = key_missing  # the name this module and its callers use


def _merge(packs: Sequence[Packed]) -> Packed:
    """Several segments' commands as one payload (one server, one connection)."""
    return Packed(
        b"".join(p.payload for p in packs),
        [shape for p in packs for shape in p.shapes],
        [order for p in packs for order in p.orders],
        words=packs[0].words,
    )


def _one_reader(packed: Packed, durable: bool) -> Callable[[Any], list[Any]]:
    """``read(conn)``: the replies of one ``Packed``'s commands (``_reader`` of one)."""
    read = _reader([packed], durable)
    return lambda conn: read(conn)[0]


class Storage:
    """Redis access for one django-redis cache alias."""

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
        engine's timeouts), owned by the caller: the mirror's tracking listener."""
        return self.client.connection_pool.make_connection()

    def ping(self) -> None:
        """The circuit breaker's probe: PING, whatever the breaker's state."""
        self.conn.ping()

    def _send(self, payload: bytes, read: Any, durable: bool = False, key: str = "") -> Any:
        """One round trip to the server holding ``key`` (a cluster routes by it)."""
        return self.conn.send(payload, read, durable, key)

    def _send_one(self, payload: bytes, durable: bool = False, key: str = "") -> list[int]:
        """One command whose small reply redis-py's parser (hiredis) reads fastest."""
        answer = self._send(payload, read_response, durable, key)
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

    def _exchange(
        self, packed: Packed, durable: bool = False, key: str = ""
    ) -> list[tuple[list[int], Any, list[int]]]:
        """Send pre-packed BITFIELD commands and read their replies (``_reader``): one
        round trip."""
        return self._send(packed.payload, _one_reader(packed, durable), durable, key)

    def exchange_chunks(
        self, packs: Iterable[Packed], durable: bool = False, key: str = ""
    ) -> list[tuple[Packed, list[tuple[list[int], Any, list[int]]]]]:
        """``_exchange`` for a batch packed chunk by chunk: each chunk's commands are
        sent as soon as ``packs`` yields them, so Redis runs them while the caller
        hashes and packs the next chunk; then every reply is read (one round trip).

        Returns, per chunk, (its Packed, its replies as ``_exchange`` returns them).
        """
        sent: list[Packed] = []

        def payloads() -> Iterator[bytes]:
            for packed in packs:
                sent.append(packed)
                yield packed.payload

        replies = self._send(payloads(), _reader(sent, durable), durable, key)
        return list(zip(sent, replies, strict=True))

    def test_chunks(self, layout: Segment, flats: Iterable[Sequence[int]]) -> list[bool]:
        """``test`` for a batch given as chunks of flat positions, made lazily (sent as made)."""
        out: list[bool] = []
        packs = (pack_test(layout, flat) for flat in flats)
        for packed, replies in self.exchange_chunks(packs, key=layout.keys.bits):
            for (head, bits, _), order in zip(replies, packed.orders, strict=True):
                self._check_trailer(layout, head[0])
                out += per_item(bits, order, layout.num_hashes, want_all=True)
        return out

    def set_chunks(self, layout: Segment, flats: Iterable[Sequence[int]]) -> WriteResult:
        """``set`` for a batch given as chunks of flat positions (sent as made)."""
        result = WriteResult([], False)
        packs = (pack_set(layout, flat) for flat in flats)
        for packed, replies in self.exchange_chunks(packs, True, layout.keys.bits):
            self._read_set(layout, packed, replies, result)
        return result

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

        replies = self._send(plan.payload, read, plan.durable)
        try:
            return plan.finish(replies)
        except FilterKeyMissing as exc:
            stray = getattr(exc, "stray_key", None)  # plans.StrayKey: a write made a bare key
            if stray:
                self._drop_stray(stray)
            raise

    def _exchange_segments(
        self, jobs: Sequence[tuple[Segment, Packed]], durable: bool = False, retried: bool = False
    ) -> list[list[tuple[list[int], Any, list[int]]]]:
        """Several segments' commands, one round trip: the commands for one server are
        concatenated on one connection, every server's are written before any reply
        is read (connections.EngineConnection.send_groups). Per job, its replies.

        On a cluster, a group whose slot moved is retried by the connection; if that
        fails again (the group now spans nodes), the whole exchange is regrouped on
        the fresh slot map and sent once more (bits are idempotent; was-new of items
        already written then reads False: only while slots migrate)."""
        if len(jobs) == 1:
            segment, packed = jobs[0]
            return [self._exchange(packed, durable, segment.keys.bits)]
        groups: dict[Any, list[int]] = {}
        for index, (segment, _packed) in enumerate(jobs):
            groups.setdefault(self.conn.route(segment.keys.bits), []).append(index)
        sends = []
        for target, indexes in groups.items():
            merged = _merge([jobs[i][1] for i in indexes])
            sends.append((target, merged.payload, _one_reader(merged, durable)))
        out: list[Any] = [None] * len(jobs)
        try:
            replied = self.conn.send_groups(sends, durable)
        except Redirect as redirect:
            if retried:  # a slot moved twice in one call: let the caller see it
                raise
            if redirect.ask:  # a slot migrating: one segment at a time, each after ASKING
                return [self._exchange(p, durable, seg.keys.bits) for seg, p in jobs]
            self.conn.refresh(force=True)  # the slot map, re-read: the groups change
            return self._exchange_segments(jobs, durable, retried=True)
        for indexes, replies in zip(groups.values(), replied, strict=True):
            start = 0
            for i in indexes:
                count = len(jobs[i][1].shapes)
                out[i] = replies[start : start + count]
                start += count
        return out

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
        out: list[bool] = []
        replies = self._exchange(packed, key=layout.keys.bits)
        for (head, bits, _), order in zip(replies, packed.orders, strict=True):
            self._check_trailer(layout, head[0])
            out += per_item(bits, order, layout.num_hashes, want_all=True)
        return out

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
        k, t_bit = layout.num_hashes, layout.trailer_offset * 8
        if len(flat) == k and isinstance(flat, list):  # one item: the leanest path
            body = bit_ops(SET_U1, flat, SET_VALUE)[0]
            reply = self._send_one(
                set_head(layout.keys.bits, t_bit, k) + body + set_tail(t_bit),
                durable=True,
                key=layout.keys.bits,
            )
            if reply[0] >> 8 != layout.fingerprint:
                self._refuse_write(layout, reply[0] >> 8)
            return WriteResult([0 in reply[1:-1]], bool(reply[0] & FLAG_REBUILDING))
        packed = pack_set(layout, flat)
        result = WriteResult([], False)
        self._read_set(layout, packed, self._exchange(packed, True, layout.keys.bits), result)
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

    def eval_packed(self, payload: bytes, count: int, durable: bool = False) -> list[Any]:
        """``count`` pre-packed ``EVAL`` commands (layout-specific scripts, e.g.
        ``scalable_ops``) pipelined: one round trip, their replies in order."""

        def read(conn) -> list[Any]:
            return [conn.read_response() for _ in range(count)]

        return self._send(payload, read, durable)
    # -- several segments in one round trip (sharded layouts) -----------------------
    # A part: (segment, its items' positions in it, those items' indexes in the batch).
    def test_segments(
        self, parts: Sequence[tuple[Segment, Sequence[int], Sequence[int]]], count: int
    ) -> list[bool]:
        """``test`` on several segments at once; per item of the batch (``count`` items)."""
        packs = [(segment, pack_test(segment, flat)) for segment, flat, _items in parts]
        out = [False] * count
        replied = self._exchange_segments(packs)
        for (segment, packed), replies, part in zip(packs, replied, parts, strict=True):
            answers: list[bool] = []
            for (head, bits, _), order in zip(replies, packed.orders, strict=True):
                self._check_trailer(segment, head[0])
                answers += per_item(bits, order, segment.num_hashes, want_all=True)
            for index, answer in zip(part[2], answers, strict=True):
                out[index] = answer
        return out

    def set_segments(
        self, parts: Sequence[tuple[Segment, Sequence[int], Sequence[int]]], count: int
    ) -> WriteResult:
        """``set`` on several segments at once: every segment's write is sent (and
        applied) even when another's key is missing; then FilterKeyMissing."""
        packs = [(segment, pack_set(segment, flat)) for segment, flat, _items in parts]
        replied = self._exchange_segments(packs, durable=True)
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
        return WriteResult(was_new, rebuilding)

    @staticmethod
    def _check_trailer(layout: Segment, fingerprint: int) -> None:
        if fingerprint != layout.fingerprint:
            raise _key_missing(layout)

    def _refuse_write(self, layout: Segment, fingerprint: int) -> None:
        """A write found no valid trailer. Fingerprint 0: the write has just created
        (or grown) a key that is nobody's (a lost key, or a retired generation's
        name): remove it in the same breath (the error path's one extra round
        trip). Then raise as a read would."""
        if fingerprint == 0:
            self._drop_stray(layout.keys.bits)
        raise _key_missing(layout)

    def _drop_stray(self, key: str) -> None:
        try:
            self._eval(scripts.DROP_STRAY, [key], [])
        except BloomError:  # the key stays invalid (fingerprint 0): never "healthy"
            pass

    # -- lifecycle ----------------------------------------------------------
    @slow
    def create(self, layout: Segment, replace: bool = True) -> bool:
        """Create the key at full size in one allocation (SETRANGE on a new key)."""
        return bool(
            self._eval(
                scripts.CREATE,
                [layout.keys.bits],
                [layout.trailer_offset, layout.trailer(), "1" if replace else "0"],
            )
        )

    @slow
    def clear(self, layout: Segment) -> int:
        return self._eval(
            scripts.CLEAR, [layout.keys.bits], [layout.trailer_offset, layout.trailer()]
        )

    def delete(self, layout: Segment) -> None:
        """The filter's keys, its bits keys of every generation included."""
        keys = layout.keys
        with self._mapped():
            client = self.conn.client_for(keys.bits)  # every generation: one hash tag, one node
            bits = list(client.scan_iter(match=layout.bits_pattern, count=1000))
        self._call("UNLINK", keys.bits, keys.build, keys.journal, keys.lock, keys.counters, *bits)

    def read_trailer(self, layout: Segment) -> tuple[int, int, int] | None:
        """(fingerprint, flags, write counter), or None when the key is absent."""
        raw = self._call("GETRANGE", layout.keys.bits, layout.trailer_offset, -1)
        if len(raw) != TRAILER_BYTES:
            return None
        return TRAILER.unpack(raw)

    @guarded
    def count_bits(self, layout: Segment, chunk_bytes: int) -> int:
        """BITCOUNT over byte ranges, pipelined: Redis is never blocked for long."""
        ranges = [
            (start, min(start + chunk_bytes, layout.num_bytes) - 1)
            for start in range(0, layout.num_bytes, chunk_bytes)
        ]
        key = layout.keys.bits
        with self._mapped(), self.conn.client_for(key).pipeline(transaction=False) as pipe:
            pipe.strlen(key)
            pipe.getrange(key, layout.trailer_offset, layout.trailer_offset + 3)
            for start, end in ranges:
                pipe.bitcount(key, start, end)
            length, fingerprint, *counts = pipe.execute()
        # The fingerprint too, not only the length: a key that a refused write
        # recreated has the right size and a zero trailer.
        if length != layout.key_length or fingerprint != fingerprint_bytes(layout.fingerprint):
            raise _key_missing(layout)
        return sum(counts)

    def memory_usage(self, layout: Segment) -> int | None:
        return self._call("MEMORY", "USAGE", layout.keys.bits, "SAMPLES", "0")

    @guarded
    def maxmemory_policy(self) -> str | None:
        """The server's ``maxmemory-policy`` (for system checks); None if CONFIG is refused.

        Managed Redis services often disable or rename CONFIG, hence None rather than an error.
        """
        try:
            with self._mapped():
                reply = self.client.config_get("maxmemory-policy")
        except (RedisUnreachable, RedisRefused):
            raise
        except BloomError:  # CONFIG disabled or renamed
            return None
        value = reply.get("maxmemory-policy") if isinstance(reply, dict) else None
        return value.decode() if isinstance(value, bytes) else value

    def read_range(self, layout: Segment, start: int, end: int) -> bytes:
        """Bitmap bytes ``start`` to ``end`` inclusive (one GETRANGE; ``bloom verify``)."""
        return self._call("GETRANGE", layout.keys.bits, start, end)

    def read_bitmap_versioned(self, layout: Segment) -> tuple[bytes, tuple[int, int]]:
        """Bitmap and (fingerprint, write counter) from ONE GET, so they match."""
        raw = self._call("GET", layout.keys.bits)
        if raw is None or len(raw) != layout.key_length:
            raise _key_missing(layout)
        fp, _flags, counter = TRAILER.unpack(raw[layout.num_bytes :])
        if fp != layout.fingerprint:
            raise _key_missing(layout)
        return raw[: layout.num_bytes], (fp, counter)

    # -- rebuild ------------------------------------------------------------
    def build_running(self, live: Segment) -> bool:
        """Whether a rebuild holds the filter's build lock (it expires after an hour)."""
        return bool(self._call("EXISTS", live.keys.lock))

    def begin_build(self, live: Segment, token: str) -> bool:
        keys = live.keys
        return bool(
            self._eval(
                scripts.BEGIN_BUILD,
                [keys.bits, keys.journal, keys.lock],
                [live.trailer_offset, token, BUILD_TTL_SECONDS],
            )
        )

    @slow
    @guarded
    def upload_build(self, new: Segment, bitmap: bytes | bytearray, chunk_bytes: int) -> None:
        """Write an in-process bitmap to the build key: full-size first, then ranges."""
        keys = new.keys
        view = memoryview(bitmap)
        client = self.conn.client_for(keys.build)
        with self._mapped():
            with client.pipeline(transaction=False) as pipe:
                pipe.unlink(keys.build)
                pipe.setrange(keys.build, new.trailer_offset, new.trailer())
                pipe.expire(keys.build, BUILD_TTL_SECONDS)
                pipe.execute()
            zero = bytes(chunk_bytes)
            for start in range(0, new.num_bytes, chunk_bytes):
                piece = view[start : start + chunk_bytes]
                if piece != zero[: len(piece)]:
                    client.setrange(keys.build, start, piece.tobytes())

    def set_build_bits(self, new: Segment, flat: Sequence[int]) -> None:
        """Set bits on the build key (journal replay)."""
        parts, shapes = [], []
        for chunk in item_chunks(flat, new.num_hashes):
            body, _order = bit_ops(SET_U1, chunk, SET_VALUE)
            parts += [header(2 + 4 * len(chunk), "BITFIELD", new.keys.build), body]
            shapes.append((0, len(chunk), 0))
        if parts:
            self._exchange(Packed(b"".join(parts), shapes, [None] * len(shapes)), key=new.keys.bits)

    def read_journal(self, live: Segment, start: int) -> list[bytes]:
        return self._call("LRANGE", live.keys.journal, start, -1)

    def journal(self, live: Segment, packed_hashes: bytes) -> bool:
        """Journal one write's items for a running rebuild; False if none runs."""
        keys = live.keys
        return bool(
            self._eval(
                scripts.JOURNAL,
                [keys.bits, keys.journal, keys.lock],
                [BUILD_TTL_SECONDS, packed_hashes],
            )
        )

    def swap_build(self, live: Segment, new: Segment, token: str, drained: int) -> int:
        """-1 when swapped; -2 when the lock was lost; else entries still to drain."""
        keys = live.keys
        return self._eval(
            scripts.SWAP,
            [keys.bits, keys.journal, keys.lock, keys.build, new.keys.bits],
            [new.trailer_offset, drained, token],
        )

    def abort_build(self, live: Segment, token: str) -> None:
        keys = live.keys
        self._eval(scripts.ABORT_BUILD, [keys.bits, keys.journal, keys.lock, keys.build], [token])

    # -- counters (validator statistics) --------------------------------------
    @guarded
    def incr_counters(self, layout: Segment, deltas: dict[str, int]) -> dict[str, int]:
        """Add to named counters in one round trip (a hash beside the bitmap); their new
        values."""
        deltas = {k: v for k, v in deltas.items() if v}
        if not deltas:
            return {}
        key = layout.keys.counters
        with self._mapped(), self.conn.client_for(key).pipeline(transaction=False) as pipe:
            for field, amount in deltas.items():
                pipe.hincrby(key, field, amount)
            return dict(zip(deltas, map(int, pipe.execute()), strict=True))

    def read_counters(self, layout: Segment) -> dict[str, int]:
        raw = self._call("HGETALL", layout.keys.counters) or {}
        return {k.decode() if isinstance(k, bytes) else k: int(v) for k, v in raw.items()}

    def write_counters(
        self, layout: Segment, values: dict[str, int], drop: tuple[str, ...] = ()
    ) -> None:
        """Set named counters and drop others, in one round trip."""
        key = layout.keys.counters
        with self._mapped(), self.conn.client_for(key).pipeline(transaction=True) as pipe:
            if values:
                pipe.hset(key, mapping=values)
            if drop:
                pipe.hdel(key, *drop)
            pipe.execute()
