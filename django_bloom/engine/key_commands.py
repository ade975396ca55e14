"""Commands on a filter's keys as wholes: create, clear, delete, read, count, counters.

A mixin of ``engine/storage.Storage`` (it uses the storage's ``conn``, ``_call``,
``_eval`` and ``_mapped``): the lifecycle and inspection commands that admin
pages, ``bloom`` verbs and checks run, none of them on the add/contains path,
and the counters hash beside the bitmap (validator statistics, items added).
"""

from __future__ import annotations

from collections.abc import Sequence

from django_bloom.engine import scripts
from django_bloom.engine.format import TRAILER, TRAILER_BYTES, fingerprint_bytes
from django_bloom.engine.segment import Segment, key_missing
from django_bloom.engine.transport.breaker import guarded
from django_bloom.engine.transport.connections import slow
from django_bloom.exceptions import BloomError, RedisRefused, RedisUnreachable

SCAN_COUNT = 1000  # keys SCAN examines per call (and the most one UNLINK takes)


class KeyCommands:
    """Whole-key commands and the counters hash (mixed into Storage)."""

    # -- lifecycle ----------------------------------------------------------
    @slow
    def create(self, layout: Segment, replace: bool = True) -> bool:
        """Create the key at full size in one allocation (SETRANGE on a new key)."""
        return bool(
            self._eval(
                scripts.CREATE,
                [layout.keys.bits],
                [layout.trailer_offset, layout.fresh_trailer(), "1" if replace else "0"],
            )
        )

    @slow
    def clear(self, layout: Segment) -> int:
        return self._eval(
            scripts.CLEAR, [layout.keys.bits], [layout.trailer_offset, layout.fresh_trailer()]
        )

    def delete(self, layout: Segment) -> None:
        """The filter's keys, its bits keys of every generation included."""
        keys = layout.keys
        self._call("UNLINK", keys.bits, keys.build, keys.journal, keys.lock, keys.counters)
        self.unlink_matching(layout.bits_pattern, keys.bits)  # every generation: one hash tag

    @guarded
    def unlink_matching(self, pattern: str, near: str = "") -> int:
        """UNLINK every key matching ``pattern`` (a kind's keys of every generation, a
        family's members): SCAN COUNT 1000 on the server holding ``near`` (a pattern inside
        one hash tag: its node), one UNLINK per batch found. How many keys went."""
        client = self.conn.client_for(near)
        removed, cursor = 0, 0
        with self._mapped():
            while True:
                cursor, keys = client.scan(cursor, match=pattern, count=SCAN_COUNT)
                if keys:
                    removed += client.unlink(*keys)
                if int(cursor) == 0:
                    return removed

    def read_trailer(self, layout: Segment) -> tuple[int, int, int] | None:
        """(fingerprint, flags, write counter), or None when the key is absent."""
        raw = self._call("GETRANGE", layout.keys.bits, layout.trailer_offset, -1)
        if len(raw) != TRAILER_BYTES:
            return None
        return TRAILER.unpack(raw)

    @guarded
    def range_replies(
        self, layout: Segment, chunk_bytes: int, command: str, start: int = 0, stop: int = 0
    ) -> list:
        """``command`` (``"bitcount"``, ``"getrange"``) on each byte range of ``chunk_bytes``
        of the bitmap (or of its bytes ``start`` to ``stop``), pipelined: Redis is never
        blocked for long. Its replies, in order; FilterKeyMissing unless the key's length
        and fingerprint (same pipeline) match."""
        stop = min(stop or layout.num_bytes, layout.num_bytes)
        ranges = [(at, min(at + chunk_bytes, stop) - 1) for at in range(start, stop, chunk_bytes)]
        key = layout.keys.bits
        with self._mapped(), self.conn.client_for(key).pipeline(transaction=False) as pipe:
            pipe.strlen(key)
            pipe.getrange(key, layout.trailer_offset, layout.trailer_offset + 3)
            for start, end in ranges:
                getattr(pipe, command)(key, start, end)
            length, fingerprint, *replies = pipe.execute()
        # The fingerprint too, not only the length: a key that a refused write
        # recreated has the right size and a zero trailer.
        if length != layout.key_length or fingerprint != fingerprint_bytes(layout.fingerprint):
            raise key_missing(layout)
        return replies

    def count_bits(self, layout: Segment, chunk_bytes: int) -> int:
        """BITCOUNT over byte ranges (``range_replies``)."""
        return sum(self.range_replies(layout, chunk_bytes, "bitcount"))

    def memory_usage(self, layout: Segment) -> int | None:
        return self._call("MEMORY", "USAGE", layout.keys.bits, "SAMPLES", "0")

    def memory_usages(self, keys: Sequence[str | bytes]) -> list[int | None]:
        """MEMORY USAGE of each of ``keys`` (one hash tag, or one server: a kind's control
        key and slices, a scalable filter's sub-filters), pipelined: one round trip."""
        with self._mapped(), self.conn.client_for(keys[0]).pipeline(transaction=False) as pipe:
            for key in keys:
                pipe.memory_usage(key, samples=0)
            return pipe.execute()

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
