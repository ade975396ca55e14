"""Lua and Redis commands of the scalable layout (``engine/kinds/scalable/layout.py``).

A scalable filter is a control hash and sub-filters 0..n-1, each a Redis string in the
standard format (bitmap + trailer) under the filter's hash tag, so every script runs on
one cluster slot. The control hash (no TTL) holds ``n`` (live sub-filters) and
``items`` (new items counted into the newest one).

The client computes every position in Python (Lua has no 64-bit integers, and the
positions must match the in-process hashing exactly) and sends them for the sub-filters
it believes live, plus *spares*: the sub-filters a growth during this call could need.
A script that finds more live sub-filters than it was given positions for writes
nothing and answers "retry with n" (``STALE``); the client re-computes and retries.

``contains`` needs no script (``ScalableLayout.contains``: HGET of the count, then the
standard BITFIELD_RO reads, pipelined). ``ADD``'s arguments::

    KEYS = control, sub_0 .. sub_{T-1}
    ARGV = T, then per sub-filter (trailer offset in bytes, k, fingerprint, capacity),
           then ONE binary string: per item (item-major) the k_j positions of
           sub-filters 0..T-1 in turn, each a big-endian u32 (a sub-filter is one Redis
           string, so m < 2**32). The item count B is its length / (4 * sum of k_j), so
           everything before the positions is the same for every call with T
           sub-filters (packed once per process).

``ADD`` replies ``{status, n, flag per item...}``; status 0 = done, ``MISSING_CONTROL``,
``STALE`` (n = live count), ``MISSING_SUB`` (n = index of the missing sub-filter).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django_bloom.engine.format import lua as _lua
from django_bloom.engine.transport.packing import arguments, header

OK = 0
MISSING_CONTROL = -1
STALE = -2
MISSING_SUB = -3

_PRELUDE = _lua("""
local T = tonumber(ARGV[1])
local off, k, fp, cap, start = {}, {}, {}, {}, {}
local stride = 0
for j = 1, T do
  local a = 1 + 4 * (j - 1)
  off[j] = tonumber(ARGV[a + 1])
  k[j] = tonumber(ARGV[a + 2])
  fp[j] = tonumber(ARGV[a + 3])
  cap[j] = tonumber(ARGV[a + 4])
  start[j] = stride
  stride = stride + k[j]
end
-- Positions: one binary argument, big-endian u32 each (8x fewer bytes to parse than
-- one decimal argument per position).
local blob = ARGV[2 + 4 * T]
local B = #blob / (4 * stride)
local P = {}
for x = 1, B * stride do P[x] = struct.unpack('>I4', blob, 4 * x - 3) end
local ctl = redis.pcall('HMGET', KEYS[1], 'n', 'items')
if type(ctl) ~= 'table' or ctl.err or not ctl[1] then return {-1, 0} end
local n = tonumber(ctl[1])
local items = tonumber(ctl[2]) or 0
if n > T then return {-2, n} end
for j = 1, n do
  local r = redis.pcall('BITFIELD', KEYS[1 + j], 'GET', 'u32', off[j] * 8)
  if type(r) ~= 'table' or r.err or r[1] ~= fp[j] then return {-3, j - 1} end
end
-- Every item's k_j bits of sub-filter j: bits[(i - 1) * k_j + q] is bit q of item i.
-- A small sub-filter (or a big batch) reads the whole string once and tests bits in Lua;
-- otherwise a few BITFIELD calls (never one per item). Converting each Lua argument for
-- redis.call costs more than copying ~100 bytes, hence the threshold.
local function read_bits(j)
  local kj, sj = k[j], start[j]
  local bits = {}
  if off[j] <= 128 * B * kj then
    local s = redis.call('GET', KEYS[1 + j])
    local byte, band, rshift, floor = string.byte, bit.band, bit.rshift, math.floor
    for i = 1, B do
      local p = (i - 1) * stride + sj
      for q = 1, kj do
        local g = P[p + q]
        bits[#bits + 1] = band(byte(s, floor(g / 8) + 1), rshift(128, g % 8)) ~= 0 and 1 or 0
      end
    end
    return bits
  end
  local per_call = math.max(1, math.floor(1200 / kj))
  for first = 1, B, per_call do
    local last = math.min(B, first + per_call - 1)
    local args = {}
    for i = first, last do
      local p = (i - 1) * stride + sj
      for q = 1, kj do
        args[#args + 1] = 'GET'
        args[#args + 1] = 'u1'
        args[#args + 1] = P[p + q]
      end
    end
    local r = redis.call('BITFIELD', KEYS[1 + j], unpack(args))
    for x = 1, #r do bits[#bits + 1] = r[x] end
  end
  return bits
end
local function all_set(bits, kj, i)
  local o = (i - 1) * kj
  for q = 1, kj do
    if bits[o + q] == 0 then return false end
  end
  return true
end
""")

# Atomic over every sub-filter: an item (maybe) in any of them is not new; otherwise its
# bits go into the newest, which is counted. A new item that finds the newest full first
# creates the next sub-filter at full size (trailer at its end, fingerprint set) and
# writes there: growth happens only when an item needs the room, so the keys a call may
# create are always among the spares it was given. Before any write, the spares must
# hold the whole call (else "retry with n", nothing written).
#
# Reads: one pass per live sub-filter over all items. Writes made by this call are
# tracked in Lua (``fresh[j][position]``) so later items of the same call, duplicates
# included, see them exactly as a later call would; the bits are written at the end.
ADD = _lua(
    _PRELUDE
    + """
local room = cap[n] - items
for j = n + 1, T do room = room + cap[j] end
if room < B then return {-2, n} end
local found = {}
for j = 1, n - 1 do
  local bits = read_bits(j)
  for i = 1, B do
    if not found[i] and all_set(bits, k[j], i) then found[i] = true end
  end
end
local newest_bits = read_bits(n)
local n0 = n
local fresh = {}
local writes = {}
for j = n, T do
  fresh[j] = {}
  writes[j] = {}
end
local function in_sub(j, i)
  local p = (i - 1) * stride + start[j]
  local f = fresh[j]
  local o = (i - 1) * k[j]
  for q = 1, k[j] do
    if not f[P[p + q]] and (j ~= n0 or newest_bits[o + q] == 0) then return false end
  end
  return true
end
local out = {0, n}
for i = 1, B do
  local seen = found[i]
  if not seen then
    for j = n0, n do
      if in_sub(j, i) then
        seen = true
        break
      end
    end
  end
  if seen then
    out[#out + 1] = 0
  else
    if items >= cap[n] then
      n = n + 1
      redis.call('DEL', KEYS[1 + n])
      redis.call('SETRANGE', KEYS[1 + n], off[n], string.rep('\\0', $TB))
      redis.call('BITFIELD', KEYS[1 + n], 'SET', 'u32', off[n] * 8, fp[n])
      items = 0
    end
    local p = (i - 1) * stride + start[n]
    local f, w = fresh[n], writes[n]
    for q = 1, k[n] do
      f[P[p + q]] = true
      w[#w + 1] = P[p + q]
    end
    items = items + 1
    out[#out + 1] = 1
  end
end
for j = n0, n do
  local w = writes[j]
  if #w > 0 then
    redis.call('BITFIELD', KEYS[1 + j], 'OVERFLOW', 'WRAP', 'INCRBY', 'i64',
      off[j] * 8 + $COUNTER_BIT, 1)
    for first = 1, #w, 1000 do
      local args = {}
      for x = first, math.min(#w, first + 999) do
        args[#args + 1] = 'SET'
        args[#args + 1] = 'u1'
        args[#args + 1] = w[x]
        args[#args + 1] = 1
      end
      redis.call('BITFIELD', KEYS[1 + j], unpack(args))
    end
  end
end
if n ~= n0 then
  redis.call('HSET', KEYS[1], 'n', n, 'items', items)
elseif #writes[n] > 0 then
  redis.call('HSET', KEYS[1], 'items', items)
end
out[2] = n
return out
"""
)

# Create (or, with ARGV[3] = '1', replace) the filter: sub-filter 0 empty at full size,
# the control hash saying one sub-filter holding nothing. KEYS: control, sub_0;
# ARGV: sub_0's trailer offset, its trailer, replace.
CREATE = """
if redis.call('EXISTS', KEYS[1]) == 1 or redis.call('EXISTS', KEYS[2]) == 1 then
  if ARGV[3] ~= '1' then return 0 end
end
redis.call('UNLINK', KEYS[1], KEYS[2])
redis.call('SETRANGE', KEYS[2], ARGV[1], ARGV[2])
redis.call('HSET', KEYS[1], 'n', 1, 'items', 0)
return 1
"""

# Empty the filter: sub-filter 0 recreated empty (its write counter carried forward, +1),
# sub-filters 1..T-1 deleted, the control back to one empty sub-filter. KEYS: control,
# sub_0 .. sub_{T-1}; ARGV: sub_0's trailer offset, its trailer. More live sub-filters
# than keys given: nothing changes, returns {-2, n} (the caller retries with n).
CLEAR = _lua("""
local T = #KEYS - 1
local n = tonumber(redis.pcall('HGET', KEYS[1], 'n')) or 1
if type(n) ~= 'number' then n = 1 end
if n > T then return {-2, n} end
local counter = 0
if redis.call('TYPE', KEYS[2]).ok == 'string'
    and redis.call('STRLEN', KEYS[2]) == ARGV[1] + $TB then
  counter = redis.call('BITFIELD', KEYS[2], 'GET', 'i64', ARGV[1] * 8 + $COUNTER_BIT)[1]
end
for j = 1, T do redis.call('UNLINK', KEYS[1 + j]) end
redis.call('SETRANGE', KEYS[2], ARGV[1], ARGV[2])
redis.call('BITFIELD', KEYS[2], 'OVERFLOW', 'WRAP', 'SET', 'i64', ARGV[1] * 8 + $COUNTER_BIT,
  counter + 1)
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], 'n', 1, 'items', 0)
return {0, 1}
""")


def pack_eval(script: str, keys: Sequence[str], args: Sequence[Any]) -> bytes:
    """One ``EVAL`` as RESP bytes (several are pipelined in one round trip)."""
    return header(3 + len(keys) + len(args), "EVAL", script, str(len(keys))) + arguments(
        *keys, *(a if isinstance(a, (bytes, str)) else str(a) for a in args)
    )
