"""Redis commands of counting filters (layout ``counting``): 4-bit counters.

A counting segment is one Redis string like any other (``engine/format.py``):
``[ counters: ceil(4m/8) bytes ][ trailer ]``. Counter ``i`` is the BITFIELD
field ``u4 #i`` (bits ``4i .. 4i+3``, big-endian, so byte ``j`` holds counters
``2j`` in its high nibble and ``2j+1`` in its low one).

- ``contains``: one ``BITFIELD_RO`` reading the trailer's fingerprint and the
  k counters of each item (an item is maybe present when all are non-zero);
- ``add``: one ``BITFIELD`` (as the standard layout's add): reads the
  trailer, ``OVERFLOW SAT INCRBY u4 #i 1`` on every counter, bumps the write
  counter; per item, was-new = some counter was 0 (its new value is 1). A key
  without this filter's fingerprint is refused as for the standard layout
  (a key the write just created is dropped again, then ``FilterKeyMissing``);
- ``remove``: one script (``REMOVE``): per item, reads its k counters and,
  only if all are non-zero, decrements them, all in the same script (atomic:
  never some and not others). An item with a zero counter is certainly absent
  and is refused (nothing written for it). A saturated counter (15) is never
  decremented: it may hold more items than it can count, so after saturation
  an item may never fully leave, but no item still in the filter ever reads
  "absent".

Batches go as one command per chunk of whole items (``remove``: one script call
per ``SCRIPT_POSITIONS`` counters), all pipelined: one round trip. Replies are
parsed by redis-py (hiredis): counter values are 0..15, not the bits the fast
reader of ``packing`` expects.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from django_bloom.engine.format import FLAG_REBUILDING
from django_bloom.engine.format import lua as _lua
from django_bloom.engine.hashing import numpy_module
from django_bloom.engine.segment import WriteResult, key_missing
from django_bloom.engine.transport.packing import (
    bit_ops,
    bulk,
    evalsha_head,
    header,
    item_chunks,
    per_item,
    set_tail,
)

if TYPE_CHECKING:  # layouts import this module; it imports neither layouts nor storage
    from django_bloom.engine.segment import Segment
    from django_bloom.engine.storage import Storage

COUNTER_BITS = 4
COUNTER_MAX = (1 << COUNTER_BITS) - 1  # 15: a saturated counter
GET_U4 = "$3\r\nGET\r\n$2\r\nu4\r\n$"
_ARG = "$"  # bit_ops with this "op": each position as a plain bulk string (a script argument)
# Counters per script call: Lua costs ~2 us of server time per counter, so a call of
# 1,024 takes ~2 ms and the pipelined replies keep coming well inside the socket timeout
# (one call per 8,192, like BITFIELD's chunks, took ~15 ms and timed out on a busy machine).
SCRIPT_POSITIONS = 1024
INCR_U4 = "$6\r\nINCRBY\r\n$2\r\nu4\r\n$"
INCR_VALUE = "$1\r\n1\r\n"

# The script's fingerprint check (returns {-1, head} when wrong:
# nothing written) and the write counter bump.
_HEAD = """
local t = tonumber(ARGV[1]) * 8
local head = redis.call('BITFIELD_RO', KEYS[1], 'GET', 'u40', t)[1]
if math.floor(head / 256) ~= tonumber(ARGV[2]) then return {-1, head} end
local k = tonumber(ARGV[3])
"""
_BUMP = "redis.call('BITFIELD', KEYS[1], 'OVERFLOW', 'WRAP', 'INCRBY', 'i64', t + $COUNTER_BIT, 1)"

# ARGV: trailer offset, fingerprint, k, then k counter offsets (``#<position>``) per item.
# Reply: {head, removed (0/1) per item}.
REMOVE = _lua(
    _HEAD
    + """
local out = {head}
local wrote = false
for s = 4, #ARGV, k do
  local get = {}
  for i = s, s + k - 1 do
    get[#get + 1] = 'GET'; get[#get + 1] = 'u4'; get[#get + 1] = ARGV[i]
  end
  local got = redis.call('BITFIELD_RO', KEYS[1], unpack(get))
  local present = 1
  for _, v in ipairs(got) do
    if v == 0 then present = 0 end
  end
  if present == 1 then
    local dec = {'OVERFLOW', 'SAT'}
    for j, v in ipairs(got) do
      if v < 15 then  -- a saturated (COUNTER_MAX) counter is never decremented
        dec[#dec + 1] = 'INCRBY'; dec[#dec + 1] = 'u4'; dec[#dec + 1] = ARGV[s + j - 1]
        dec[#dec + 1] = -1
      end
    end
    if #dec > 2 then redis.call('BITFIELD', KEYS[1], unpack(dec)) end
    wrote = true
  end
  out[#out + 1] = present
end
if wrote then
"""
    + _BUMP
    + """
end
return out
"""
)

# Journal replay during a rebuild: increment counters on the build key (no trailer check:
# the build key was just made by this rebuild, and it may have no fingerprint'd name).
BUILD_INCR = """
local ops = {'OVERFLOW', 'SAT'}
for i = 1, #ARGV do
  ops[#ops + 1] = 'INCRBY'; ops[#ops + 1] = 'u4'; ops[#ops + 1] = '#' .. ARGV[i]
  ops[#ops + 1] = 1
  if #ops > 4000 then redis.call('BITFIELD', KEYS[1], unpack(ops)); ops = {'OVERFLOW', 'SAT'} end
end
if #ops > 2 then redis.call('BITFIELD', KEYS[1], unpack(ops)) end
return 1
"""


NONZERO_NIBBLES = bytes(((b >> 4) != 0) + ((b & 15) != 0) for b in range(256))


def _as_list(flat: Sequence[int]) -> list[int]:
    return flat.tolist() if hasattr(flat, "tolist") else list(flat)


def _script_calls(script: str, segment: Segment, flat: list[int]) -> list[bytes]:
    """EVALSHA per chunk of whole items, with their ``#p`` counter offsets (in item
    order: a list, never numpy's grouped order)."""
    keys = [segment.keys.bits]
    fixed = (segment.trailer_offset, segment.fingerprint, segment.num_hashes)
    commands = []
    step = max(1, SCRIPT_POSITIONS // segment.num_hashes) * segment.num_hashes
    for start in range(0, len(flat), step):
        chunk = flat[start : start + step]
        body, _order = bit_ops(_ARG, chunk, mark="#")
        commands.append(evalsha_head(script, keys, fixed, len(chunk)) + body)
    return commands


def _per_item(segment: Segment, replies: list[Any]) -> tuple[list[bool], bool]:
    """(per item flag, rebuilding) from script replies; FilterKeyMissing on a bad trailer."""
    out: list[bool] = []
    rebuilding = False
    for reply in replies:
        if reply[0] == -1 or int(reply[0]) >> 8 != segment.fingerprint:
            raise key_missing(segment)
        rebuilding = rebuilding or bool(int(reply[0]) & FLAG_REBUILDING)
        out += [bool(v) for v in reply[1:]]
    return out, rebuilding


# -- the operations a counting layout runs ------------------------------------------------
@lru_cache(maxsize=1024)
def _test_head(key: str, trailer_bit: int, ops: int) -> bytes:
    return header(2 + 3 + 3 * ops, "BITFIELD_RO", key, "GET", "u32") + bulk(str(trailer_bit))


@lru_cache(maxsize=1024)
def _add_head(key: str, trailer_bit: int, ops: int) -> bytes:
    nargs = 2 + 3 + 2 + 4 * ops + 6
    return header(nargs, "BITFIELD", key, "GET", "u40", str(trailer_bit), "OVERFLOW", "SAT")


def counters_test(storage: Storage, segment: Segment, flat: Sequence[int]) -> list[bool]:
    """Per item: are all its k counters non-zero? (fingerprint checked in the same command)."""
    k, t_bit = segment.num_hashes, segment.trailer_offset * 8
    if len(flat) == k and isinstance(flat, list):  # one item: the leanest path
        reply = storage._send_one(
            _test_head(segment.keys.bits, t_bit, k) + bit_ops(GET_U4, flat, mark="#")[0]
        )
        if reply[0] != segment.fingerprint:
            raise key_missing(segment)
        return [0 not in reply[1:]]
    commands, orders = [], []
    for chunk in item_chunks(flat, k):
        body, order = bit_ops(GET_U4, chunk, mark="#")  # numpy: grouped, ``order`` says how
        orders.append(order)
        commands.append(
            header(2 + 3 + 3 * len(chunk), "BITFIELD_RO", segment.keys.bits, "GET", "u32")
            + bulk(str(t_bit))
            + body
        )
    replies = storage.sent_replies(commands)
    out: list[bool] = []
    np = numpy_module()
    for reply, order in zip(replies, orders, strict=True):
        if reply[0] != segment.fingerprint:
            raise key_missing(segment)
        if np is not None and len(reply) > 64:
            nonzero = (np.asarray(reply[1:], dtype=np.uint8) != 0).view(np.uint8).tobytes()
        else:
            nonzero = bytes(1 if v else 0 for v in reply[1:])
        out += per_item(nonzero, order, k, want_all=True)
    return out


def counters_add(storage: Storage, segment: Segment, flat: Sequence[int]) -> WriteResult:
    """Increment (saturating) k counters per item; per item, whether one was 0.

    One BITFIELD per chunk of whole items, pipelined (one round trip), like the standard
    layout's ``SET u1``: it reads the trailer first and bumps the write counter last;
    ``OVERFLOW SAT INCRBY u4 #p 1`` answers each counter's new value, and 1 means it
    was 0. A key found without this filter's fingerprint is refused as the standard
    layout refuses it (``Storage._refuse_write``: a key the write just created is
    removed again, then FilterKeyMissing). Not a script: Lua spends ~7 ms of server
    time per 1,000 items converting the arguments, the command itself ~0.1-0.3 ms.
    """
    k, t_bit = segment.num_hashes, segment.trailer_offset * 8
    key = segment.keys.bits
    tail = set_tail(t_bit)
    if len(flat) == k and isinstance(flat, list):  # one item: the leanest path
        body = bit_ops(INCR_U4, flat, INCR_VALUE, mark="#")[0]
        reply, short = storage._replied(_add_head(key, t_bit, k) + body + tail)
        if reply[0] >> 8 != segment.fingerprint:
            storage._refuse_write(segment, reply[0] >> 8)  # raises FilterKeyMissing
        return WriteResult([1 in reply[1:-1]], bool(reply[0] & FLAG_REBUILDING), short)
    commands, orders = [], []
    for chunk in item_chunks(flat, k):
        body, order = bit_ops(INCR_U4, chunk, INCR_VALUE, mark="#")
        nargs = 2 + 3 + 2 + 4 * len(chunk) + 6
        head = header(nargs, "BITFIELD", key, "GET", "u40", str(t_bit), "OVERFLOW", "SAT")
        commands.append(head + body + tail)
        orders.append(order)
    replies, short = storage.send_commands(commands, durable=True)
    storage.raise_errors(replies)  # error replies; a WAIT shortfall after the trailers
    np = numpy_module()
    was_new: list[bool] = []
    rebuilding = False
    for reply, order in zip(replies, orders, strict=True):
        if reply[0] >> 8 != segment.fingerprint:
            storage._refuse_write(segment, reply[0] >> 8)  # raises FilterKeyMissing
        rebuilding = rebuilding or bool(reply[0] & FLAG_REBUILDING)
        values = reply[1:-1]
        if np is not None and len(values) > 64:
            old = (np.asarray(values, dtype=np.uint8) != 1).view(np.uint8).tobytes()
        else:
            old = bytes(0 if v == 1 else 1 for v in values)  # 0: this counter was 0
        was_new += per_item(old, order, k, want_all=False)
    return WriteResult(was_new, rebuilding, short)


def counters_remove(storage: Storage, segment: Segment, flat: Sequence[int]) -> list[bool]:
    """Decrement k counters per (maybe) present item; False (nothing written) for absent ones.
    The script over every chunk of items (loaded once if Redis does not have it); a bad
    trailer is raised before a WAIT shortfall (``WriteResult.reported``)."""
    calls = _script_calls(REMOVE, segment, _as_list(flat))
    replies, short = storage.run_scripts(REMOVE, calls, durable=True)
    removed = _per_item(segment, storage.raise_errors(replies))[0]
    return WriteResult(removed, False, short).reported()


def build_increment(storage: Storage, build: Segment, flat: Sequence[int]) -> None:
    """Journal replay into a rebuild's build key: increment each position's counter."""
    flat = _as_list(flat)
    if flat:
        storage._eval(BUILD_INCR, [build.keys.build], flat)


def count_nonzero(storage: Storage, segment: Segment, chunk_bytes: int) -> int:
    """Counters set (non-zero), read in GETRANGE chunks pipelined; the trailer checked."""
    total = 0
    for chunk in storage.range_replies(segment, max(1, chunk_bytes), "getrange"):
        counted = chunk.translate(NONZERO_NIBBLES)
        total += counted.count(1) + 2 * counted.count(2)
    return total
