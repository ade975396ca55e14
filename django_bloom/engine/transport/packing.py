"""RESP for the hot path: BITFIELD commands built as bytes, replies read as bytes.

Why by hand: a batch of 1,000 items is 7,000 bit operations. Formatting 7,000
offsets through redis-py costs ~5 ms of Python; parsing the 7,000-integer
reply into Python ints costs ~0.4 ms even with hiredis. Both dwarf the
~2 ms Redis spends on the command. So:

* offsets are formatted with numpy when it is installed (the ``fast`` extra):
  positions are grouped by their number of decimal digits and each group is
  written as one fixed-width byte matrix. The operations of one command are
  then in digit-group order, not item order; ``order`` says where each
  reply element belongs. Without numpy the same bytes come from plain Python;
* every reply element of a bit operation is ``:0\\r\\n`` or ``:1\\r\\n``
  (exactly 4 bytes), so a command's bit replies are one fixed-size block,
  checked and sliced without creating a Python object per bit.

Nothing here does I/O: connections.py sends the bytes and hands the reply reader
its socket.
"""

from __future__ import annotations

import hashlib
import socket
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from django_bloom.engine.format import STAMP_BIT, new_stamp
from django_bloom.engine.hashing import numpy_module
from django_bloom.exceptions import BloomError

GET_U1 = "$3\r\nGET\r\n$2\r\nu1\r\n$"
SET_U1 = "$3\r\nSET\r\n$2\r\nu1\r\n$"
SET_VALUE = "$1\r\n1\r\n"
GET_I64 = "$3\r\nGET\r\n$3\r\ni64\r\n$"
MAX_BITOPS = 8192  # bit operations per BITFIELD command (~2 ms of server time)
RAW_READ_MIN_OPS = 512  # below this, hiredis parses a reply faster than ReplyReader
BIT_REPLY_BYTES = 4  # ":0\r\n" or ":1\r\n"
_TO_BINARY = bytes.maketrans(b"01", b"\x00\x01")
_MAX_DIGITS = 20  # a uint64 has at most 20 decimal digits
_POW10 = [10**i for i in range(1, _MAX_DIGITS)]
_DIGIT_TABLE = None  # numpy: b"0000"..b"9999" as uint32, built on first use


def bulk(value: str | bytes) -> bytes:
    if isinstance(value, str):
        value = value.encode()
    return b"$%d\r\n%s\r\n" % (len(value), value)


def header(nargs: int, *args: str | bytes) -> bytes:
    """``*nargs`` then the first arguments as bulk strings."""
    return b"*%d\r\n" % nargs + b"".join(bulk(a) for a in args)


def arguments(*args: str | bytes) -> bytes:
    """Bulk strings without the ``*n`` count (the middle or end of a command)."""
    return b"".join(bulk(a) for a in args)


# -- the kinds' own scripts ------------------------------------------------------------
_SHAS: dict[str, str] = {}


def sha(script: str) -> str:
    """The SHA1 ``EVALSHA`` names ``script`` by (computed once per process)."""
    return _SHAS.get(script) or _SHAS.setdefault(script, hashlib.sha1(script.encode()).hexdigest())


def evalsha_head(script: str, keys: Sequence[str], args: Sequence[Any], more: int = 0) -> bytes:
    """``EVALSHA`` with its keys and first arguments (numbers as decimal text), ``more``
    arguments still to come (``Storage.run_scripts`` loads the script on NOSCRIPT)."""
    return header(
        3 + len(keys) + len(args) + more, "EVALSHA", sha(script), str(len(keys))
    ) + arguments(*keys, *(a if isinstance(a, (bytes, str)) else str(a) for a in args))


# -- building bit operations ------------------------------------------------------
def bit_ops(
    op: str, positions: Sequence[int], value: str = "", mark: str = ""
) -> tuple[bytes, Any]:
    """``op`` (``GET_U1``/``SET_U1``/``GET_I64``) once per offset, as RESP bulk strings.

    ``mark`` prefixes each offset (``#`` makes BITFIELD multiply it by the type's width).

    Returns ``(payload, order)``: ``order`` is None when the operations are in
    the positions' order, else an integer array with, for each operation in
    the payload, the index of its position in ``positions``.
    """
    if not isinstance(positions, list):
        np = numpy_module()
        if np is not None and isinstance(positions, np.ndarray):
            return _bit_ops_numpy(np, op.encode(), positions, value.encode(), mark.encode())
    tail, extra = "\r\n" + value, len(mark)
    return (
        "".join([f"{op}{len(s) + extra}\r\n{mark}{s}{tail}" for s in map(str, positions)]).encode(),
        None,
    )


def _bit_ops_numpy(np, op: bytes, positions, value: bytes, mark: bytes) -> tuple[bytes, Any]:
    """Operations grouped by offset width; each group is one fixed-width byte matrix."""
    values = positions.astype(np.uint64, copy=False)
    if not len(values):
        return b"", None
    powers = _POW10
    if int(values.max()) < 1 << 32:  # every Redis bit offset: faster division
        values, powers = values.astype(np.uint32), _POW10[:9]
    widths = np.searchsorted(np.array(powers, dtype=values.dtype), values, side="right") + 1
    counts = np.bincount(widths).tolist()
    groups = [width for width, count in enumerate(counts) if count]
    order = None
    if len(groups) > 1:
        order = np.argsort(widths, kind="stable")
        values = np.take(values, order)
    digits = _decimal_matrix(np, values, groups[-1])
    parts, start = [], 0
    for width in groups:
        stop = start + counts[width]
        size = b"%d\r\n" % (width + len(mark))
        row = op + size + mark + b"0" * width + b"\r\n" + value
        first = len(op) + len(size) + len(mark)
        matrix = np.empty((stop - start, len(row)), dtype=np.uint8)
        matrix[:] = np.frombuffer(row, dtype=np.uint8)
        matrix[:, first : first + width] = digits[start:stop, digits.shape[1] - width :]
        parts.append(matrix.tobytes())
        start = stop
    return b"".join(parts), order


def _decimal_matrix(np, values, width: int):
    """(n, width) uint8: each value as zero-padded ASCII decimal digits.

    Four digits at a time through a 10,000-entry table: two or three array
    operations per batch instead of one per digit.
    """
    global _DIGIT_TABLE
    if _DIGIT_TABLE is None:
        _DIGIT_TABLE = np.frombuffer(b"".join(b"%04d" % i for i in range(10_000)), np.uint32)
    chunks = -(-width // 4)
    out = np.empty((len(values), chunks), dtype=np.uint32)
    rest = values
    for col in range(chunks - 1, -1, -1):
        rest, low = np.divmod(rest, values.dtype.type(10_000))
        out[:, col] = np.take(_DIGIT_TABLE, low.astype(np.intp))
    return out.view(np.uint8)[:, chunks * 4 - width :]


# -- reading replies ------------------------------------------------------------
class ReplyError(BloomError):
    """Redis answered a hot-path command with an error."""


class ReplyReader:
    """Reads RESP2/RESP3 replies straight from a connected socket.

    Only for a connection nobody else is reading (a pooled connection we
    hold). RESP3 push frames arriving before a reply are skipped.
    """

    def __init__(self, sock: socket.socket):
        self.sock = sock
        self.buf = bytearray()
        self.pos = 0

    def _more(self, wanted: int = 0) -> None:
        # Small reads stay below malloc's mmap threshold: a 256 KiB recv buffer
        # per call costs more than a whole single-item round trip.
        chunk = self.sock.recv(min(max(wanted, 16384), 1 << 20))
        if not chunk:
            raise ConnectionError("Redis closed the connection")
        if self.pos:
            del self.buf[: self.pos]
            self.pos = 0
        self.buf += chunk

    def line(self) -> bytes:
        while True:
            end = self.buf.find(b"\r\n", self.pos)
            if end >= 0:
                out = bytes(self.buf[self.pos : end])
                self.pos = end + 2
                return out
            self._more()

    def exact(self, size: int) -> bytes:
        while len(self.buf) - self.pos < size:
            self._more(size - (len(self.buf) - self.pos))
        out = bytes(self.buf[self.pos : self.pos + size])
        self.pos += size
        return out

    def integer(self) -> int:
        line = self.line()
        if line[:1] == b":":
            return int(line[1:])
        raise self._unexpected(line)

    def bitfield(self, head: int, ops: int, tail: int) -> tuple[list[int], bytes, list[int]]:
        """One BITFIELD reply: ``head`` integers, ``ops`` bits, ``tail`` integers.

        The bits come back as bytes of value 0 or 1, one per operation.
        """
        line = self.line()
        while line[:1] == b">":  # a RESP3 push (e.g. a maintenance notice): not ours, skip it
            self._skip_aggregate(int(line[1:]))
            line = self.line()
        if line[:1] != b"*" or int(line[1:]) != head + ops + tail:
            raise self._unexpected(line)
        first = [self.integer() for _ in range(head)]
        block = self.exact(ops * BIT_REPLY_BYTES)
        if block[0::4] != b":" * ops or block[2::4] != b"\r" * ops:
            raise BloomError("unexpected BITFIELD reply from Redis (not one bit per operation)")
        bits = block[1::4]
        if bits.translate(None, b"01"):
            raise BloomError("unexpected BITFIELD reply from Redis (a bit that is not 0 or 1)")
        last = [self.integer() for _ in range(tail)]
        return first, bits.translate(_TO_BINARY), last

    def _skip_aggregate(self, count: int) -> None:
        for _ in range(count):
            self._skip_value()

    def _skip_value(self) -> None:
        line = self.line()
        kind, rest = line[:1], line[1:]
        if kind in b"$!=" and rest != b"-1":
            self.exact(int(rest) + 2)
        elif kind in b"*>~" and rest != b"-1":
            self._skip_aggregate(int(rest))
        elif kind == b"%":
            self._skip_aggregate(2 * int(rest))
        elif kind == b"|":  # attributes, then the value they describe
            self._skip_aggregate(2 * int(rest))
            self._skip_value()

    def _unexpected(self, line: bytes) -> BloomError:
        if line[:1] == b"-":
            return ReplyError(line[1:].decode(errors="replace"))
        return BloomError(f"unexpected reply from Redis: {line[:60]!r}")


def split_reply(
    answer: list[Any], head: int, tail: int, as_bits: bool = True
) -> tuple[list[int], Any, list[int]]:
    """The same split for a reply parsed by redis-py: bits as bytes, or the integers as a list."""
    if isinstance(answer, Exception):
        raise ReplyError(str(answer))
    end = len(answer) - tail
    middle = answer[head:end]
    return list(answer[:head]), bytes(middle) if as_bits else middle, list(answer[end:])


def words_hold(words: list[int], masks: Any, order: Any) -> list[bool]:
    """Blocked layout: per item, whether its word (read as i64) has all its mask bits."""
    np = numpy_module()
    if np is not None and isinstance(masks, np.ndarray):
        got = np.array(words, dtype=np.int64).view(np.uint64)
        if order is not None:
            placed = np.empty_like(got)
            placed[order] = got
            got = placed
        return ((got & masks) == masks).tolist()
    return [(word & mask) == mask for word, mask in zip(words, masks, strict=True)]


def per_item(bits: bytes, order: Any, k: int, want_all: bool) -> list[bool]:
    """Per item of k consecutive operations: all bits set (``want_all``) or any bit clear."""
    np = numpy_module()
    if np is not None and (order is not None or len(bits) > 64):
        arr = np.frombuffer(bits, dtype=np.uint8)
        if order is not None:
            placed = np.empty_like(arr)
            placed[order] = arr
            arr = placed
        grid = arr.reshape(-1, k)
        return (grid.all(axis=1) if want_all else ~grid.all(axis=1)).tolist()
    if want_all:
        return [b"\x00" not in bits[i : i + k] for i in range(0, len(bits), k)]
    return [b"\x00" in bits[i : i + k] for i in range(0, len(bits), k)]


# -- BITFIELD commands on one segment ---------------------------------------------
def item_chunks(flat: Sequence[int], k: int) -> Iterator[Sequence[int]]:
    """Whole items per command: an item's bits never straddle two commands."""
    step = max(1, MAX_BITOPS // k) * k
    if len(flat) <= step:  # the common case: one command, no copy
        yield flat
        return
    for start in range(0, len(flat), step):
        yield flat[start : start + step]


STREAM_LAST_ITEMS = 64  # a streamed batch's last chunk: Redis finishes soon after it is sent


def stream_chunks(count: int, size: int) -> list[tuple[int, int]]:
    """(start, stop) of each chunk of a streamed batch (``BATCH_STREAM_ITEMS``): about
    equal chunks of at most ``size`` items, then the last ``STREAM_LAST_ITEMS``."""
    body = max(0, count - STREAM_LAST_ITEMS)
    pieces = -(-body // max(1, size))
    bounds = [body * i // pieces for i in range(pieces + 1)] if pieces else [0]
    return [*zip(bounds, bounds[1:], strict=False), (body, count)]


@lru_cache(maxsize=1024)
def test_head(key: str, trailer_bit: int, ops: int) -> bytes:
    return header(2 + 3 + 3 * ops, "BITFIELD_RO", key, "GET", "u32", str(trailer_bit))


@lru_cache(maxsize=1024)
def set_head(key: str, trailer_bit: int, ops: int) -> bytes:
    # the arguments of: BITFIELD key, GET u40 <trailer>, the ops, ``stamped_tail``
    return header(2 + 3 + 4 * ops + 10, "BITFIELD", key, "GET", "u40", str(trailer_bit))


@lru_cache(maxsize=1024)
def set_tail(trailer_bit: int) -> bytes:
    return arguments("OVERFLOW", "WRAP", "INCRBY", "i64", str(trailer_bit + 64), "1")


@lru_cache(maxsize=1024)
def _stamp_parts(trailer_bit: int) -> tuple[bytes, bytes]:
    return arguments("SET", "u24", str(trailer_bit + STAMP_BIT)), set_tail(trailer_bit)


def stamped_tail(trailer_bit: int) -> bytes:
    """Stamp the trailer (``format.new_stamp``), bump the write counter: two replies."""
    stamp, count = _stamp_parts(trailer_bit)
    value = b"%d" % new_stamp()
    return b"%s$%d\r\n%s\r\n%s" % (stamp, len(value), value, count)


@dataclass
class Packed:
    """Commands ready to send, and what each reply will hold."""

    payload: bytes
    shapes: list[tuple[int, int, int]]  # per command: (head ints, bit ops, tail ints)
    orders: list[Any]  # per command: see packing.bit_ops
    words: bool = False  # replies hold 64-bit words, not bits


def _pack_bits(layout: Any, flat: Sequence[int], op: str, value: str, head, tail) -> Packed:
    """One BITFIELD command per chunk of whole items: head, ``op`` per bit, tail."""
    key, t_bit = layout.keys.bits, layout.trailer_offset * 8
    tail_bytes = tail(t_bit) if tail else b""
    parts, shapes, orders = [], [], []
    for chunk in item_chunks(flat, layout.num_hashes):
        body, order = bit_ops(op, chunk, value)
        parts += [head(key, t_bit, len(chunk)), body, tail_bytes]
        shapes.append((1, len(chunk), 2 if tail else 0))
        orders.append(order)
    return Packed(b"".join(parts), shapes, orders)


def pack_test(layout: Any, flat: Sequence[int]) -> Packed:
    """BITFIELD_RO commands reading the trailer's fingerprint and k bits per item."""
    return _pack_bits(layout, flat, GET_U1, "", test_head, None)


def pack_words(layout: Any, words: Sequence[int]) -> Packed:
    """BITFIELD_RO commands reading the fingerprint and one word per item."""
    key, t_bit = layout.keys.bits, layout.trailer_offset * 8
    parts, shapes, orders = [], [], []
    for chunk in item_chunks(words, 1):
        body, order = bit_ops(GET_I64, chunk, mark="#")
        parts += [test_head(key, t_bit, len(chunk)), body]
        shapes.append((1, len(chunk), 0))
        orders.append(order)
    return Packed(b"".join(parts), shapes, orders, words=True)


def pack_set(layout: Any, flat: Sequence[int]) -> Packed:
    """BITFIELD commands: read the trailer, SET u1 each bit, stamp the trailer and bump
    the write counter (``stamped_tail``: one stamp for the call's commands, each counts)."""
    return _pack_bits(layout, flat, SET_U1, SET_VALUE, set_head, stamped_tail)
