"""Lua for the rare operations (create, clear, swap, journal, stray keys).

Never on the hot path. The trailer's offsets come from ``engine/format.py``
(``$TB``, ``$FLAGS_BIT``, ``$COUNTER_BIT`` spelled in by ``format.lua``).
``TYPE`` guards keep a key of another type (a list at the filter's name) from
aborting them: such a key is treated as missing and replaced.
"""

from django_bloom.engine.format import lua as _lua

CREATE = """
if redis.call('EXISTS', KEYS[1]) == 1 then
  if ARGV[3] ~= '1' then return 0 end
  redis.call('UNLINK', KEYS[1])
end
redis.call('SETRANGE', KEYS[1], ARGV[1], ARGV[2])
return 1
"""

# Replace the key by an empty one of the same layout, carrying the write
# counter forward (+1) so mirrors notice; ARGV[2], the trailer, has a new write stamp.
CLEAR = _lua("""
local counter = 0
if redis.call('TYPE', KEYS[1]).ok == 'string' then
  counter = redis.call('BITFIELD', KEYS[1], 'GET', 'i64', ARGV[1] * 8 + $COUNTER_BIT)[1]
end
redis.call('UNLINK', KEYS[1])
redis.call('SETRANGE', KEYS[1], ARGV[1], ARGV[2])
redis.call('BITFIELD', KEYS[1], 'OVERFLOW', 'WRAP', 'SET', 'i64', ARGV[1] * 8 + $COUNTER_BIT,
  counter + 1)
return counter + 1
""")

# Rebuild step 1: take the lock, flag the live key, start an empty journal.
BEGIN_BUILD = _lua("""
if redis.call('SET', KEYS[3], ARGV[2], 'NX', 'EX', ARGV[3]) == false then return 0 end
redis.call('DEL', KEYS[2])
if redis.call('TYPE', KEYS[1]).ok == 'string'
    and redis.call('STRLEN', KEYS[1]) >= ARGV[1] + $TB then
  redis.call('BITFIELD', KEYS[1], 'SET', 'u8', ARGV[1] * 8 + $FLAGS_BIT, 1)
end
return 1
""")

# Writers that saw the REBUILDING flag journal their items' hashes here (one
# entry per write: the items' (h1, h2) pairs, 16 bytes each). If the rebuild
# has ended in the meantime, clear a stale flag and report 0 so the writer
# adds again to the (new) live key.
JOURNAL = _lua("""
if redis.call('EXISTS', KEYS[3]) == 1 then
  redis.call('RPUSH', KEYS[2], ARGV[2])
  redis.call('EXPIRE', KEYS[2], ARGV[1])
  return 1
end
if redis.call('TYPE', KEYS[1]).ok == 'string' and redis.call('STRLEN', KEYS[1]) >= $TB then
  local off = (redis.call('STRLEN', KEYS[1]) - $TB) * 8 + $FLAGS_BIT
  redis.call('BITFIELD', KEYS[1], 'SET', 'u8', off, 0)
end
return 0
""")

# Rebuild last step: swap only if no journal entry arrived since the builder last
# drained it; carry the write counter forward (the stamp is the build key's own). The
# build key goes to the new live name (KEYS[5]; another name when the geometry changed,
# and then the old live key goes), losing the build key's expiry: a filter never expires.
SWAP = _lua("""
if redis.call('GET', KEYS[3]) ~= ARGV[3] then return -2 end
local pending = redis.call('LLEN', KEYS[2])
if pending ~= tonumber(ARGV[2]) then return pending end
local counter = 0
if redis.call('TYPE', KEYS[1]).ok == 'string' then
  local len = redis.call('STRLEN', KEYS[1])
  if len >= $TB then
    counter = redis.call('BITFIELD', KEYS[1], 'GET', 'i64', (len - $TB) * 8 + $COUNTER_BIT)[1]
  end
end
redis.call('BITFIELD', KEYS[4], 'OVERFLOW', 'WRAP', 'SET', 'i64', ARGV[1] * 8 + $COUNTER_BIT,
  counter + 1)
redis.call('RENAME', KEYS[4], KEYS[5])
redis.call('PERSIST', KEYS[5])
if KEYS[5] ~= KEYS[1] then redis.call('DEL', KEYS[1]) end
redis.call('DEL', KEYS[2], KEYS[3])
return -1
""")

ABORT_BUILD = _lua("""
if redis.call('GET', KEYS[3]) == ARGV[1] then
  redis.call('DEL', KEYS[2], KEYS[3], KEYS[4])
  if redis.call('TYPE', KEYS[1]).ok == 'string' then
    local len = redis.call('STRLEN', KEYS[1])
    if len >= $TB then
      redis.call('BITFIELD', KEYS[1], 'SET', 'u8', (len - $TB) * 8 + $FLAGS_BIT, 0)
    end
  end
  return 1
end
return 0
""")

# A write that found no valid trailer has created (or grown) a key whose
# trailer fingerprint reads 0: a lost key recreated by BITFIELD, or a stray
# written by a handle of a generation that no longer exists. A valid key never
# has fingerprint 0, so such a key holds nothing worth keeping: remove it, so
# it neither looks healthy nor holds memory.
DROP_STRAY = _lua("""
if redis.call('TYPE', KEYS[1]).ok ~= 'string' then return 0 end
local len = redis.call('STRLEN', KEYS[1])
if len < $TB then return 0 end
local fp = redis.call('GETRANGE', KEYS[1], len - $TB, len - $TB + 3)
if fp ~= string.char(0, 0, 0, 0) then return 0 end
redis.call('UNLINK', KEYS[1])
return 1
""")
