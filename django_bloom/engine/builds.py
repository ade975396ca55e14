"""The rebuild protocol's commands: lock, journal, build key, swap.

A mixin of ``engine/storage.Storage`` (it uses the storage's ``conn``, ``_call``,
``_eval``, ``_mapped`` and ``_exchange``). A rebuild (``rebuild.py``) takes the
build lock (``begin_build``), fills a fresh build key (``upload_build``), replays
what writers journaled meanwhile (``read_journal``, ``set_build_bits``) and swaps
the build key in (``swap_build``), or gives up (``abort_build``). Writers that see
the REBUILDING flag journal their items (``journal``). The Lua: ``engine/scripts.py``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from django_bloom.engine import scripts
from django_bloom.engine.segment import Segment
from django_bloom.engine.transport.breaker import guarded
from django_bloom.engine.transport.connections import slow
from django_bloom.engine.transport.packing import (
    SET_U1,
    SET_VALUE,
    Packed,
    bit_ops,
    header,
    item_chunks,
)

BUILD_TTL_SECONDS = 3600  # the build lock, journal and build key expire after an hour


class BuildCommands:
    """The commands of a rebuild (mixed into Storage)."""

    def build_running(self, live: Segment) -> bool:
        """Whether a rebuild holds the filter's build lock (it expires after an hour)."""
        return bool(self._call("EXISTS", live.keys.lock))

    def _eval_build(self, live: Segment, script: str, args: list, *more_keys: str) -> Any:
        """``script`` with KEYS the filter's key, its journal, its build lock, ``more_keys``."""
        keys = live.keys
        return self._eval(script, [keys.bits, keys.journal, keys.lock, *more_keys], args)

    def begin_build(self, live: Segment, token: str) -> bool:
        args = [live.trailer_offset, token, BUILD_TTL_SECONDS]
        return bool(self._eval_build(live, scripts.BEGIN_BUILD, args))

    def upload_build(self, new: Segment, bitmap: bytes | bytearray, chunk_bytes: int) -> None:
        """Write an in-process bitmap to the build key: full-size first, then ranges."""
        self.prepare_key(new, new.keys.build, BUILD_TTL_SECONDS)
        self.write_ranges(new.keys.build, [(0, bitmap)], chunk_bytes)

    @slow
    @guarded
    def prepare_key(self, segment: Segment, key: str, ttl: int | None = None) -> None:
        """``key`` made anew: ``segment``'s size, zero bits, a fresh trailer (and a TTL)."""
        with self._mapped(), self.conn.client_for(key).pipeline(transaction=False) as pipe:
            pipe.unlink(key)
            pipe.setrange(key, segment.trailer_offset, segment.fresh_trailer())
            if ttl:
                pipe.expire(key, ttl)
            pipe.execute()

    @slow
    @guarded
    def write_ranges(self, key: str, pieces: Iterable[tuple[int, Any]], chunk_bytes: int) -> None:
        """``SETRANGE key offset data`` for each (offset, data) of ``pieces``, at most
        ``chunk_bytes`` a command, sent on one connection as they come (Redis writes one
        while the next is read or made), their replies read last; pieces of zeros are
        skipped (``prepare_key`` made the key zero). The data is never copied."""
        pool = self.conn.client_for(key).connection_pool
        conn, sent, done = pool.get_connection(), 0, False
        try:
            with self._mapped():
                for offset, data in pieces:
                    view = memoryview(data)
                    for at in range(0, len(view), chunk_bytes):
                        piece = view[at : at + chunk_bytes]
                        if piece[0] or piece[-1] or piece.tobytes() != bytes(len(piece)):
                            head = header(4, "SETRANGE", key, str(offset + at))
                            conn.send_packed_command(
                                [head, b"$%d\r\n" % len(piece), piece, b"\r\n"]
                            )
                            sent += 1
                for _ in range(sent):
                    conn.read_response()
                done = True
        finally:
            if not done:  # replies left unread: the connection cannot serve another call
                conn.disconnect()
            pool.release(conn)

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
        return bool(self._eval_build(live, scripts.JOURNAL, [BUILD_TTL_SECONDS, packed_hashes]))

    def swap_build(self, live: Segment, new: Segment, token: str, drained: int) -> int:
        """-1 when swapped; -2 when the lock was lost; else entries still to drain."""
        args = [new.trailer_offset, drained, token]
        return self._eval_build(live, scripts.SWAP, args, live.keys.build, new.keys.bits)

    def abort_build(self, live: Segment, token: str) -> None:
        self._eval_build(live, scripts.ABORT_BUILD, [token], live.keys.build)
