"""Reading the replies of pre-packed BITFIELD commands (``transport/packing.Packed``).

``reader`` picks how: straight from the socket for large bit replies
(``packing.ReplyReader``), redis-py's parser (hiredis) otherwise. Storage's
exchanges (``engine/storage.py``, ``engine/multisegment.py``) pass these readers
to the connection adapter, which calls them once every command is written.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from redis.connection import AbstractConnection

from django_bloom.engine.transport.packing import (
    RAW_READ_MIN_OPS,
    Packed,
    ReplyReader,
    split_reply,
)


def reader(packs: list[Packed], durable: bool) -> Callable[[Any], list[Any]]:
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
            raw = ReplyReader(sock)
            return [[raw.bitfield(*shape) for shape in packed.shapes] for packed in packs]
        return [
            [
                split_reply(conn.read_response(), head, tail, as_bits=not packed.words)
                for head, _ops, tail in packed.shapes
            ]
            for packed in packs
        ]

    return read


def one_reader(packed: Packed, durable: bool) -> Callable[[Any], list[Any]]:
    """``read(conn)``: the replies of one ``Packed``'s commands (``reader`` of one)."""
    read = reader([packed], durable)
    return lambda conn: read(conn)[0]


def merge_packs(packs: Sequence[Packed]) -> Packed:
    """Several segments' commands as one payload (one server, one connection)."""
    return Packed(
        b"".join(p.payload for p in packs),
        [shape for p in packs for shape in p.shapes],
        [order for p in packs for order in p.orders],
        words=packs[0].words,
    )
