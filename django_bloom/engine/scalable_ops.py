"""Lua and Redis commands of the scalable layout (``engine/layouts/scalable.py``).

A scalable filter is a control hash and sub-filters 0..n-1, each a Redis string in the
standard format (bitmap + trailer) under the filter's hash tag, so every script runs on
one cluster slot. The control hash (no TTL) holds ``n`` (live sub-filters) and
``items`` (new items counted into the newest one).

The client computes every position in Python (Lua has no 64-bit integers, and the
positions must match the in-process hashing exactly) and sends them for the sub-filters
it believes live, plus *spares*: the sub-filters a growth during this call could need.
A script that finds more live sub-filters than it was given positions for writes
nothing and answers "retry with n" (``STALE``); the client re-computes and retries.

Argument layout shared by ``ADD`` and ``CONTAINS``::

    KEYS = control, sub_0 .. sub_{T-1}
    ARGV = T, B, then per sub-filter (trailer offset in bytes, k, fingerprint, capacity),
           then per item (item-major) the k_j positions of sub-filters 0..T-1 in turn.

Replies: ``{status, n, flag per item...}``; status 0 = done, ``MISSING_CONTROL``,
``STALE`` (n = live count), ``MISSING_SUB`` (n = index of the missing sub-filter).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django_bloom.engine.format import lua as _lua
from django_bloom.engine.packing import arguments, header

OK = 0
MISSING_CONTROL = -1
STALE = -2
MISSING_SUB = -3

_PRELUDE = _lua("""
local T = tonumber(ARGV[1])
local B = tonumber(ARGV[2])
local off, k, fp, cap, start = {}, {}, {}, {}, {}
local stride = 0
for j = 1, T do
  local a = 2 + 4 * (j - 1)
  off[j] = tonumber(ARGV[a + 1])
  k[j] = tonumber(ARGV[a + 2])
  fp[j] = tonumber(ARGV[a + 3])
  cap[j] = tonumber(ARGV[a + 4])
  start[j] = stride
  stride = stride + k[j]
end
local base = 2 + 4 * T
local ctl = redis.pcall('HMGET', KEYS[1], 'n', 'items')
if type(ctl) ~= 'table' or ctl.err or not ctl[1] then return {-1, 0} end
local n = tonumber(ctl[1])
local items = tonumber(ctl[2]) or 0
if n > T then return {-2, n} end
for j = 1, n do
  local r = redis.pcall('BITFIELD', KEYS[1 + j], 'GET', 'u32', off[j] * 8)
  if type(r) ~= 'table' or r.err or r[1] ~= fp[j] then return {-3, j - 1} end
end
local function has(j, p)
  local args = {}
  for q = 1, k[j] do
    args[#args + 1] = 'GET'
    args[#args + 1] = 'u1'
    args[#args + 1] = ARGV[p + q]
  end
  local r = redis.call('BITFIELD', KEYS[1 + j], unpack(args))
  for q = 1, k[j] do
    if r[q] == 0 then return false end
  end
  return true
end
local function seen(p)
  for j = n, 1, -1 do
    if has(j, p + start[j]) then return true end
  end
  return false
end
""")

CONTAINS = (
    _PRELUDE
    + """
local out = {0, n}
for i = 1, B do
  out[#out + 1] = seen(base + (i - 1) * stride) and 1 or 0
end
return out
"""
)

# Atomic over every sub-filter: an item (maybe) in any of them is not new; otherwise its
# bits go into the newest, which is counted. A new item that finds the newest full first
# creates the next sub-filter at full size (trailer at its end, fingerprint set) and
# writes there: growth happens only when an item needs the room, so the keys a call may
# create are always among the spares it was given.
ADD = _lua(
    _PRELUDE
    + """
local out = {0, n}
local n0 = n
for i = 1, B do
  local p = base + (i - 1) * stride
  if seen(p) then
    out[#out + 1] = 0
  else
    if items >= cap[n] then
      if n >= T then return redis.error_reply('scalable filter: no spare sub-filter given') end
      n = n + 1
      redis.call('DEL', KEYS[1 + n])
      redis.call('SETRANGE', KEYS[1 + n], off[n], string.rep('\\0', $TB))
      redis.call('BITFIELD', KEYS[1 + n], 'SET', 'u32', off[n] * 8, fp[n])
      items = 0
    end
    local args = {}
    local q0 = p + start[n]
    for q = 1, k[n] do
      args[#args + 1] = 'SET'
      args[#args + 1] = 'u1'
      args[#args + 1] = ARGV[q0 + q]
      args[#args + 1] = 1
    end
    redis.call('BITFIELD', KEYS[1 + n], 'OVERFLOW', 'WRAP', 'INCRBY', 'i64',
      off[n] * 8 + $COUNTER_BIT, 1, unpack(args))
    items = items + 1
    out[#out + 1] = 1
  end
end
if n ~= n0 then
  redis.call('HSET', KEYS[1], 'n', n, 'items', items)
else
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
