"""The Lua of rotating-window filters (layout ``rotating``); the key layout and the
commands that send these scripts: ``commands.py``; why the window steps as it does:
docs/rotating.md ("Clocks").

The window is a slice INDEX kept in the control key, not a clock reading: it never goes
back. The live slices are the current one and the ``slices`` (W) before it. The window
steps to the next slice once BOTH the Redis server's clock (``TIME``) and the caller's
clock (an argument) say ``slice_seconds`` have passed since the current slice opened,
each measured against the opening as that kind of clock recorded it: a server clock
stepped back or forward, or a promoted replica whose clock lags or leads, never moves
the window on its own (nor does a caller's skewed clock), and application servers whose
clocks disagree still write the same slice. A step past several slice periods (the
filter was idle) moves several slices at once. A step deletes the slices that leave the
window; a slice's TTL (long: two windows and a day) only collects the keys of a filter
nobody uses any more.

``WINDOW`` runs one add or contains of a batch in one script, so one round trip. A
contains works out the step without writing it; an add writes it (the control key's
header), so it replicates with the slice it writes. Slice key names are derived inside
the script from ``KEYS[2]`` (the slice-name prefix, same hash tag, so same slot: works on
Redis Cluster, though Redis documents undeclared keys as discouraged).

The control key is created with the filter and never expires: when it is gone (Redis
restarted without persistence, flushed) every call raises ``FilterKeyMissing`` instead
of answering "absent" from missing slices. A slice key that is missing is simply an
expired (or never written) slice. A control key without the header (written by the
release before issue 34, or just created or cleared) starts from the server's clock,
``floor(TIME / slice_seconds)``, as that release did, and never behind a slice it
recorded.

Replies: a string of ``0``/``1`` per item; -1 control key missing or not this
filter's; -2 a slice key that is not this filter's.
"""

from __future__ import annotations

from django_bloom.engine import format as fmt

SMALL_PROBE = 64  # up to this many bits per slice: one BITFIELD reads them all (see the script)
BITFIELD_OPS = 1000  # ops per BITFIELD inside the script (Lua's unpack limit is ~8000 values)

# The window's step (module docstring), shared by both scripts. In: ``control``, ``s``,
# ``w``, ``now_c`` (the caller's clock). Out: ``cur`` (the current slice's index),
# ``steps`` (slices stepped now), ``moved`` (the header must be written), ``slots``,
# ``hat`` (the header's offset), ``recorded(e)``.
STEP = """
local slots = w + 2
-- After the trailer, the slice record: the index of the slice created in each of W + 2
-- slots (slot = index mod (W + 2)), so the script reads only slices it knows exist.
local function slot(j)  -- the index recorded in slot j, -1 for none
  local at = $TB + 4 * j + 1
  if #control < at + 3 then return -1 end
  return struct.unpack('>I4', control, at)
end
local function recorded(e) return slot(e % slots) == e end
-- Then the header: the current index, its opening by the server's and the caller's clock.
local hat = $TB + 4 * slots
local t = redis.call('TIME')
local now_s = tonumber(t[1]) + tonumber(t[2]) / 1000000
local cur, open_s, open_c
local moved = #control < hat + 20
if moved then  -- no header yet: from the server's clock, never behind a recorded slice
  cur = math.floor(now_s / s)
  for j = 0, slots - 1 do cur = math.max(cur, slot(j)) end
  open_s = cur * s
  open_c = now_c - (now_s - open_s)
else
  cur, open_s, open_c = struct.unpack('>I4dd', control, hat + 1)
end
-- A clock behind the opening it recorded (stepped back, or another machine's): count
-- from now, so the current slice lasts at most one more period, never less.
if now_s < open_s then open_s, moved = now_s, true end
if now_c < open_c then open_c, moved = now_c, true end
local steps = 0
local elapsed = math.min(now_s - open_s, now_c - open_c)
if elapsed >= s then
  steps = math.floor(elapsed / s)
  cur = cur + steps
  open_s = now_s - (elapsed - steps * s)
  open_c = now_c - (elapsed - steps * s)
  moved = true
end
"""

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
local now_c = tonumber(ARGV[7])
$STEP
local epoch = cur
local blob = ARGV[8]
local pos = {}  -- as strings: converted once here, not once per slice probed
for i = 1, #blob / 4 do
  pos[i] = tostring(struct.unpack('>I4', blob, 4 * i - 3))
end
local n = #pos / k
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
  if h ~= '' and h ~= fp then return -2 end
  if steps > 0 then  -- the slices that left the window go now (not at a clock's say-so)
    for j = 0, slots - 1 do
      local e = slot(j)
      if e >= 0 and e < epoch - w then redis.call('DEL', KEYS[2] .. e) end
    end
  end
  if moved then
    redis.call('SETRANGE', KEYS[1], hat, struct.pack('>I4dd', cur, open_s, open_c))
  end
  if h == '' then
    redis.call('SETRANGE', key, toff, ARGV[6])
    redis.call('EXPIRE', key, string.format('%.0f', math.min(2 * slots * s + 86400, 2 ^ 52)))
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
    .replace("$STEP", fmt.lua(STEP))
    .replace("$OPS", str(BITFIELD_OPS))
    .replace("$SMALL", str(SMALL_PROBE))
)

# The current index and the live slices that exist (stats). KEYS: control, slice prefix;
# ARGV: slice_seconds, W, the caller's clock.
LIVE_SLICES = fmt.lua(
    """
local control = redis.call('GET', KEYS[1]) or ''
local s = tonumber(ARGV[1])
local w = tonumber(ARGV[2])
local now_c = tonumber(ARGV[3])
$STEP
local out = {cur}
for e = cur, cur - w, -1 do
  if redis.call('EXISTS', KEYS[2] .. e) == 1 then out[#out + 1] = e end
end
return out
""".replace("$STEP", STEP)
)
