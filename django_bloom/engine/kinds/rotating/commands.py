"""Redis operations of rotating-window filters (layout ``rotating``): one Lua script.

A rotating filter is a control key and one Redis string per time slice, all
under the filter's hash tag (one cluster slot)::

    <prefix>:{<name>}:v1:<generation>:bits           control: trailer + slice record, no TTL
    <prefix>:{<name>}:v1:<generation>:slice:<epoch>  a slice: bitmap + trailer, with a TTL

The control key is the 16-byte trailer (the filter's fingerprint) followed by
the slice record: W + 2 big-endian u32 slots, slot ``epoch mod (W + 2)`` holding
the epoch of the slice last created there. The script reads only slices the
record names, so a window with few live slices costs no command per missing one.

``epoch = floor(server time / slice_seconds)``. The LIVE slices are the current
one and the ``slices`` (W) before it: an item is remembered for at least
W x slice_seconds and at most (W + 1) x slice_seconds. A slice key expires by
itself (EXPIREAT the end of its liveness plus one slice of margin).

``WINDOW`` runs one add or contains of a batch in one script, so one round
trip. It reads the REDIS SERVER's clock (``TIME``): application servers whose
clocks disagree still pick the same slice. Slice key names are derived inside
the script from ``KEYS[2]`` (the slice-name prefix, same hash tag, so same slot:
works on Redis Cluster, though Redis documents undeclared keys as discouraged).

The control key is created with the filter and never expires: when it is gone
(Redis restarted without persistence, flushed) every call raises
``FilterKeyMissing`` instead of answering "absent" from missing slices. A slice
key that is missing is simply an expired (or never written) slice.

Replies: a string of ``0``/``1`` per item; -1 control key missing or not this
filter's; -2 a slice key that is not this filter's.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any

from redis import exceptions as redis_errors

from django_bloom.engine import format as fmt
from django_bloom.engine.hashing import numpy_module
from django_bloom.engine.transport.connections import redis_failure
from django_bloom.engine.transport.packing import arguments, bulk, header
from django_bloom.exceptions import FilterKeyMissing, WriteNotReplicated

if TYPE_CHECKING:
    from django_bloom.engine.segment import Segment
    from django_bloom.engine.storage import Storage

# Bit positions per script call: a batch is split into calls of whole items,
# pipelined (one round trip), so Redis is never blocked long by one script
# (a contains may test each position in every one of the W + 1 live slices).
POSITIONS_PER_CALL = 1024
READ_BYTES = 16 * 1024  # Redis reads a client's input this much at a time (PROTO_IOBUF_LEN)
SMALL_PROBE = 64  # up to this many bits per slice: one BITFIELD reads them all (see the script)
BITFIELD_OPS = 1000  # ops per BITFIELD inside the script (Lua's unpack limit is ~8000 values)

WINDOW = (
    fmt.lua("""
local fp = string.sub(ARGV[6], 1, 4)
local fpnum = struct.unpack('>I4', fp)
local control = redis.call('GET', KEYS[1])
if not control or string.sub(control, 1, 4) ~= fp then return -1 end
local s = tonumber(ARGV[2])
local w = tonumber(ARGV[3])
local k = tonumber(ARGV[4])
local toff = tonumber(ARGV[5])
local now = redis.call('TIME')
local epoch = math.floor(tonumber(now[1]) / s)
local blob = ARGV[7]
local pos = {}  -- as strings: converted once here, not once per slice probed
for i = 1, #blob / 4 do
  pos[i] = tostring(struct.unpack('>I4', blob, 4 * i - 3))
end
local n = #pos / k

-- The control key records, after its trailer, the epoch of the slice created in
-- each of W + 2 slots (slot = epoch mod (W + 2)): the script reads only slices it
-- knows exist, without a command per missing one.
local slots = w + 2
local function recorded(e)
  local at = $TB + 4 * (e % slots) + 1
  if #control < at + 3 then return false end
  return struct.unpack('>I4', control, at) == e
end
local function record(e)
  redis.call('SETRANGE', KEYS[1], $TB + 4 * (e % slots), struct.pack('>I4', e))
end

-- BITFIELD <op> u1 over a list of positions (in chunks); the replies, in order.
local function bits(key, op, list)
  local out = {}
  local i = 1
  while i <= #list do
    local args = {}
    local j = 0
    while i <= #list and j < $OPS do
      args[#args + 1] = op
      args[#args + 1] = 'u1'
      args[#args + 1] = list[i]
      if op == 'SET' then args[#args + 1] = 1 end
      i = i + 1
      j = j + 1
    end
    local got = redis.call('BITFIELD', key, unpack(args))
    for x = 1, #got do out[#out + 1] = got[x] end
  end
  return out
end

-- Items of `pending` whose k bits are all set in `key`: marked in `found`.
-- Bit j of every candidate, then bit j + 1 of those that had it set...: an
-- item absent from the slice usually costs one or two reads, not k.
-- Returns the items still not found.
local function probe(key, pending, found)
  local cand = pending
  for j = 1, k do
    if #cand == 0 then break end
    local list = {}
    for x, item in ipairs(cand) do list[x] = pos[(item - 1) * k + j] end
    local got = bits(key, 'GET', list)
    local keep = {}
    for x, item in ipairs(cand) do
      if got[x] == 1 then keep[#keep + 1] = item end
    end
    cand = keep
  end
  for _, item in ipairs(cand) do found[item] = true end
  local still = {}
  for _, item in ipairs(pending) do
    if not found[item] then still[#still + 1] = item end
  end
  return still
end

-- A slice's fingerprint; '' when the key does not exist, '?' when it is too short.
local function head(key)
  local h = redis.call('GETRANGE', key, toff, toff + 3)
  if h == '' and redis.call('EXISTS', key) == 1 then return '?' end
  return h
end

local found = {}
local pending = {}
local first = epoch
if ARGV[1] == 'a' then
  local key = KEYS[2] .. epoch
  local h = head(key)
  if h == '' then
    redis.call('SETRANGE', key, toff, ARGV[6])
    redis.call('EXPIREAT', key, (epoch + w + 2) * s)
  elseif h ~= fp then
    return -2
  end
  if not recorded(epoch) then record(epoch) end
  local old = bits(key, 'SET', pos)
  for item = 1, n do
    local all = true
    for j = 1, k do
      if old[(item - 1) * k + j] == 0 then all = false break end
    end
    if all then found[item] = true else pending[#pending + 1] = item end
  end
  first = epoch - 1
else
  for item = 1, n do pending[item] = item end
end
-- A few items: one BITFIELD per slice reads its fingerprint and all their bits
-- (fingerprint 0: no such slice, unless a key of another kind sits there).
local function probe_small(key, pending, found)
  local args = {'GET', 'u32', toff * 8}
  for _, item in ipairs(pending) do
    for j = 1, k do
      args[#args + 1] = 'GET'
      args[#args + 1] = 'u1'
      args[#args + 1] = pos[(item - 1) * k + j]
    end
  end
  local got = redis.call('BITFIELD_RO', key, unpack(args))
  if got[1] ~= fpnum then
    if got[1] == 0 and redis.call('EXISTS', key) == 0 then return pending end
    return nil
  end
  local still = {}
  for x, item in ipairs(pending) do
    local all = true
    for j = 1, k do
      if got[1 + (x - 1) * k + j] == 0 then all = false break end
    end
    if all then found[item] = true else still[#still + 1] = item end
  end
  return still
end

for e = first, epoch - w, -1 do
  if #pending == 0 then break end
  local key = KEYS[2] .. e
  if not recorded(e) then
    -- never created (or cleared): nothing to read
  elseif #pending * k <= $SMALL then
    pending = probe_small(key, pending, found)
    if pending == nil then return -2 end
  else
    local h = head(key)
    if h == fp then
      pending = probe(key, pending, found)
    elseif h ~= '' then
      return -2
    end
  end
end
-- contains: 1 = in some live slice; add: 1 = new (in none of them before this add)
local yes, no = '1', '0'
if ARGV[1] == 'a' then yes, no = '0', '1' end
local out = {}
for item = 1, n do
  if found[item] then out[item] = yes else out[item] = no end
end
return table.concat(out)
""")
    .replace("$OPS", str(BITFIELD_OPS))
    .replace("$SMALL", str(SMALL_PROBE))
)

WINDOW_SHA = hashlib.sha1(WINDOW.encode()).hexdigest()

# The live slices' keys and the server's epoch (stats, clear).
LIVE_SLICES = """
local s = tonumber(ARGV[1])
local w = tonumber(ARGV[2])
local epoch = math.floor(tonumber(redis.call('TIME')[1]) / s)
local out = {epoch}
for e = epoch, epoch - w, -1 do
  if redis.call('EXISTS', KEYS[1] .. e) == 1 then out[#out + 1] = e end
end
return out
"""


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
        cached = header(13, "EVALSHA", WINDOW_SHA, "2", window.control_key, window.slice_prefix)
        cached += arguments(
            mode,
            str(window.slice_seconds),
            str(window.slices),
            str(seg.num_hashes),
            str(seg.trailer_offset),
            seg.trailer(),
        )
        if len(_heads) > 1024:
            _heads.clear()
        _heads[(window, mode)] = cached
    return cached


def _call_bytes(head: bytes, blob: bytes, pad: bool) -> bytes:
    """One EVALSHA: the head, the positions, and ARGV[8], ignored by the script: empty, or
    (``pad``: a batch of several calls) filler up to ``READ_BYTES``.

    Why pad: Redis reads a client's input 16 KB at a time, runs every command in it,
    and only then writes their replies. A call carries 4 bytes per position but may
    cost Redis W + 1 slice probes per item, so four unpadded calls per read would keep
    the first reply back for all four (a full window's batch could then outlast
    SOCKET_TIMEOUT on a busy server). Padded, each reply leaves after its own call, at
    ~16 bytes per position: about what the standard layout's BITFIELD sends.
    """
    filler = READ_BYTES - len(head) - len(blob) - 32 if pad else 0
    return head + bulk(blob) + bulk(b"\0" * max(0, filler))


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
    replies, unreplicated = _exchange(storage, payloads, durable)
    stale = [i for i, r in enumerate(replies) if isinstance(r, redis_errors.NoScriptError)]
    if stale:
        # Redis lost its script cache (restart, SCRIPT FLUSH): load it, run those calls
        # again. A NOSCRIPT call wrote nothing, so its WAIT verdict does not count.
        if len(stale) == len(replies):
            unreplicated = None
        storage._call("SCRIPT", "LOAD", WINDOW)
        retried, again = _exchange(storage, [payloads[i] for i in stale], durable)
        unreplicated = unreplicated or again
        for i, reply in zip(stale, retried, strict=True):
            replies[i] = reply
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


def _exchange(
    storage: Storage, payloads: list[bytes], durable: bool
) -> tuple[list[Any], WriteNotReplicated | None]:
    """Send every payload, then read every reply (error replies returned, not raised).

    With ``durable`` and WRITE_REPLICAS, a WAIT follows in the same round trip; when too
    few replicas acknowledged, the replies come back WITH the WriteNotReplicated (the
    caller decides: a call that failed with NOSCRIPT wrote nothing to replicate).
    """
    got: list[Any] = []

    def read(conn: Any) -> list[Any]:
        for _ in payloads:
            try:
                got.append(conn.read_response())
            except redis_errors.ResponseError as exc:
                got.append(exc)
        return got

    try:
        return storage._send(b"".join(payloads), read, durable), None
    except WriteNotReplicated as exc:
        if len(got) != len(payloads):
            raise
        return got, exc


# -- lifecycle ---------------------------------------------------------------------
def create(storage: Storage, window: Window, replace: bool) -> bool:
    """The control key (the trailer alone, no TTL); ``replace`` drops every slice too."""
    trailer = window.segment.trailer()
    if not replace:
        return bool(storage._call("SET", window.control_key, trailer, "NX"))
    drop_slices(storage, window)
    storage._call("SET", window.control_key, trailer)
    return True


def clear(storage: Storage, window: Window) -> None:
    """Forget the slice record (the control key back to the bare trailer), drop every slice."""
    check_control(storage, window)
    storage._call("SET", window.control_key, window.segment.trailer(), "XX")
    drop_slices(storage, window)


def drop_slices(storage: Storage, window: Window) -> None:
    with storage._mapped():
        keys = list(storage.client.scan_iter(match=window.slice_pattern, count=1000))
    for start in range(0, len(keys), 500):
        storage._call("UNLINK", *keys[start : start + 500])


def check_control(storage: Storage, window: Window) -> None:
    raw = storage._call("GET", window.control_key)
    if raw is None or raw[: fmt.FINGERPRINT_BYTES] != fmt.fingerprint_bytes(
        window.segment.fingerprint
    ):
        raise _missing(window, f"its control key {window.control_key!r} is missing")


def live_slices(storage: Storage, window: Window) -> tuple[int, list[int]]:
    """(the server's current epoch, the epochs of live slices that exist, newest first)."""
    reply = storage._eval(LIVE_SLICES, [window.slice_prefix], [window.slice_seconds, window.slices])
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
    keys = [window.control_key, *(window.slice_key(e) for e in epochs)]
    with storage._mapped(), storage.client.pipeline(transaction=False) as pipe:
        for key in keys:
            pipe.memory_usage(key, samples=0)
        sizes = pipe.execute()
    if sizes[0] is None:
        return None
    return sum(s or 0 for s in sizes)
