"""Redis operations of rotating-window filters (layout ``rotating``): the window, its
keys and the commands that run its Lua (``scripts.py``: ``WINDOW``, ``LIVE_SLICES``).

A rotating filter is a control key and one Redis string per time slice, all
under the filter's hash tag (one cluster slot)::

    <prefix>:{<name>}:v1:<generation>:bits           control: trailer, record, header; no TTL
    <prefix>:{<name>}:v1:<generation>:slice:<index>  a slice: bitmap + trailer, a GC TTL

The control key is the 16-byte trailer (the filter's fingerprint), the slice record
(W + 2 big-endian u32 slots, slot ``index mod (W + 2)`` holding the index of the slice
last created there: the script reads only slices the record names, so a window with few
live slices costs no command per missing one), then the header (``>Idd``: the current
index, its opening by the server's clock and by the caller's; absent in keys of the
release before issue 34, whose indexes were ``floor(TIME / slice_seconds)``).
"""

from __future__ import annotations

import struct
import time
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING

from django_bloom.engine import format as fmt
from django_bloom.engine.hashing import numpy_module
from django_bloom.engine.kinds.rotating.scripts import LIVE_SLICES, WINDOW
from django_bloom.engine.transport.errors import redis_failure
from django_bloom.engine.transport.packing import bulk, evalsha_head
from django_bloom.exceptions import FilterKeyMissing

if TYPE_CHECKING:
    from django_bloom.engine.segment import Segment
    from django_bloom.engine.storage import Storage

# Bit positions per script call: a batch is split into calls of whole items,
# pipelined (one round trip), so Redis is never blocked long by one script
# (a contains may test each position in every one of the W + 1 live slices).
POSITIONS_PER_CALL = 1024
READ_BYTES = 16 * 1024  # Redis reads a client's input this much at a time (PROTO_IOBUF_LEN)


@dataclass(frozen=True)
class Window:
    """What the script needs of one rotating filter."""

    segment: Segment  # the primary segment: key names, slice size, k, fingerprint
    slices: int  # W: live slices are the current one and the W before it
    slice_seconds: int

    @property
    def control_key(self) -> str:
        return self.segment.keys.bits

    @cached_property
    def slice_prefix(self) -> str:
        return slice_prefix(self.segment)

    def slice_key(self, epoch: int) -> str:
        return f"{self.slice_prefix}{epoch}"

    @cached_property
    def slice_pattern(self) -> str:
        """SCAN pattern of this filter's slice keys, every generation."""
        escaped = fmt.bits_pattern(self.segment.prefix, self.segment.name)
        return escaped[: -len("*bits")] + "*slice:*"

    def command_head(self, mode: str) -> bytes:
        """EVALSHA and every argument but the positions (cached per window and mode)."""
        return _command_head(self, mode)


def slice_prefix(segment: Segment) -> str:
    keys = segment.keys.bits
    return keys[: -len("bits")] + "slice:"


_heads: dict[tuple[Window, str], bytes] = {}


def _command_head(window: Window, mode: str) -> bytes:
    cached = _heads.get((window, mode))
    if cached is None:
        seg = window.segment
        cached = evalsha_head(
            WINDOW,
            [window.control_key, window.slice_prefix],
            [mode, window.slice_seconds, window.slices, seg.num_hashes, seg.trailer_offset],
            more=4,  # the trailer, the caller's clock, the positions, the filler
        ) + bulk(seg.trailer())
        if len(_heads) > 1024:
            _heads.clear()
        _heads[(window, mode)] = cached
    return cached


def _call_bytes(head: bytes, blob: bytes, pad: bool) -> bytes:
    """One EVALSHA: the head, this process's clock (the window steps when it agrees with
    the server's: ``scripts.py``), the positions, and ARGV[9], ignored by the script:
    empty, or (``pad``: a batch of several calls) filler up to ``READ_BYTES``.

    Why pad: Redis reads a client's input 16 KB at a time, runs every command in it,
    and only then writes their replies. A call carries 4 bytes per position but may
    cost Redis W + 1 slice probes per item, so four unpadded calls per read would keep
    the first reply back for all four (a full window's batch could then outlast
    SOCKET_TIMEOUT on a busy server). Padded, each reply leaves after its own call, at
    ~16 bytes per position: about what the standard layout's BITFIELD sends.
    """
    filler = READ_BYTES - len(head) - len(blob) - 64 if pad else 0
    return head + bulk(b"%.6f" % time.time()) + bulk(blob) + bulk(b"\0" * max(0, filler))


def _blob(flat: Sequence[int]) -> bytes:
    np = numpy_module()
    if np is not None and isinstance(flat, np.ndarray):
        return flat.astype(">u4").tobytes()
    return struct.pack(f">{len(flat)}I", *flat)


def _missing(window: Window, what: str) -> FilterKeyMissing:
    return FilterKeyMissing(
        f"Bloom filter {window.segment.name!r} (rotating window): {what} "
        "(Redis restarted without persistence, flushed, or evicted it). It cannot answer "
        "until it is created again (a window filter has no source to rebuild from)."
    )


def run_window(storage: Storage, window: Window, mode: str, flat: Sequence[int]) -> list[bool]:
    """Add (``mode`` "a": per item, was it new to every live slice) or test (``"c"``: per
    item, is it in any live slice) a batch: one round trip (EVALSHA per chunk, pipelined)."""
    k = window.segment.num_hashes
    step = max(1, POSITIONS_PER_CALL // k) * k
    chunks = [flat[i : i + step] for i in range(0, len(flat), step)] if len(flat) > step else [flat]
    head = window.command_head(mode)
    payloads = [_call_bytes(head, _blob(chunk), len(chunks) > 1) for chunk in chunks]
    durable = mode == "a"
    replies, unreplicated = storage.run_scripts(WINDOW, payloads, durable)
    out: list[bool] = []
    for reply in replies:
        if isinstance(reply, Exception):
            raise redis_failure(storage.alias, reply)
        if reply == -1:
            raise _missing(window, f"its control key {window.control_key!r} is missing")
        if reply == -2:
            raise _missing(window, "a slice key holds another filter's data")
        text = reply if isinstance(reply, bytes) else reply.encode()
        out += [c == 49 for c in text]  # b"1"
    if unreplicated is not None:
        raise unreplicated  # applied on the primary, not acknowledged by enough replicas
    return out


# -- lifecycle ---------------------------------------------------------------------
def create(storage: Storage, window: Window, replace: bool) -> bool:
    """The control key (the trailer alone, no TTL); ``replace`` drops every slice too."""
    trailer = window.segment.trailer()
    if not replace:
        return bool(storage.command("SET", window.control_key, trailer, "NX"))
    drop_slices(storage, window)
    storage.command("SET", window.control_key, trailer)
    return True


def clear(storage: Storage, window: Window) -> None:
    """Forget the slice record (the control key back to the bare trailer), drop every slice."""
    check_control(storage, window)
    storage.command("SET", window.control_key, window.segment.trailer(), "XX")
    drop_slices(storage, window)


def drop_slices(storage: Storage, window: Window) -> None:
    storage.unlink_matching(window.slice_pattern, window.control_key)


def check_control(storage: Storage, window: Window) -> None:
    raw = storage.command("GET", window.control_key)
    if raw is None or raw[: fmt.FINGERPRINT_BYTES] != fmt.fingerprint_bytes(
        window.segment.fingerprint
    ):
        raise _missing(window, f"its control key {window.control_key!r} is missing")


def live_slices(storage: Storage, window: Window) -> tuple[int, list[int]]:
    """(the current slice's index, the indexes of live slices that exist, newest first)."""
    keys = [window.control_key, window.slice_prefix]
    reply = storage._eval(LIVE_SLICES, keys, [window.slice_seconds, window.slices, time.time()])
    return int(reply[0]), [int(e) for e in reply[1:]]


def slice_bits(storage: Storage, window: Window) -> dict[int, int]:
    """Bits set per live slice (epoch -> count); FilterKeyMissing without the control key."""
    check_control(storage, window)
    _epoch, epochs = live_slices(storage, window)
    seg = window.segment
    if not epochs:
        return {}
    with storage._mapped(), storage.client.pipeline(transaction=False) as pipe:
        for e in epochs:
            pipe.bitcount(window.slice_key(e), 0, seg.num_bytes - 1)
        counts = pipe.execute()
    return dict(zip(epochs, counts, strict=True))


def memory_usage(storage: Storage, window: Window) -> int | None:
    """MEMORY USAGE of the control key and every live slice."""
    _epoch, epochs = live_slices(storage, window)
    sizes = storage.memory_usages([window.control_key, *(window.slice_key(e) for e in epochs)])
    if sizes[0] is None:
        return None
    return sum(s or 0 for s in sizes)
