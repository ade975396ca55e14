"""Redis operations of filter families (``engine.family``): the member scripts and
the family-wide SCANs. Runs through ``Storage``'s connection adapter like every
other command (breaker, timeouts, error mapping).

Single operations are ONE round trip: ``member_set`` and ``member_test`` are one
``EVALSHA`` each (with ``WAIT`` behind a write when ``WRITE_REPLICAS`` is set,
in the same round trip, as for plain filters). A server that lost its scripts
(restart) answers NOSCRIPT once: the script is loaded and the call repeated.

The control key's value names the family's generation (``control_value``:
fingerprint and the row's generation), and both scripts compare it with the
handle's before touching the member key: a handle made before the family was
deleted and created again (another process's cached metadata) raises instead of
writing into a key nobody reads, or answering "absent" for the new family. The
previous release stored the fingerprint alone; that value is still accepted.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from django_bloom.engine.format import lua
from django_bloom.engine.segment import WriteResult
from django_bloom.engine.transport.packing import evalsha_head, header
from django_bloom.exceptions import FilterKeyMissing

if TYPE_CHECKING:
    from django_bloom.engine.segment import Segment
    from django_bloom.engine.storage import Storage

# The member scripts' common part. KEYS[1] the member's bits key, KEYS[2] the family
# control key. ARGV[1], ARGV[2] the control key values this handle accepts (its
# generation's, the previous release's), ARGV[3] the trailer offset (bytes), ARGV[4] the
# member's trailer (a read sends its first 4 bytes: the fingerprint); then the script's own.
# -1: the control key is gone (the family's data was lost or it was deleted): nothing is
#     written, so a lost Redis never fills up with members that would answer "absent"
#     for items added before the loss; a read raises FilterKeyMissing.
# -3: the control key is another generation's (the family was deleted and created again
#     since this handle was made): nothing is written or answered.
# foreign(): the member key exists but is not this family's (size, type or fingerprint): -2.
# bits(cmd, op, value, first): BITFIELD ``op`` u1 of the positions ARGV[first..] (with
# ``value`` for SET), 1000 positions a call; one character '0'/'1' per position.
MEMBER_PRELUDE = """
local c = redis.call('GET', KEYS[2])
if not c then return -1 end
if c ~= ARGV[1] and c ~= ARGV[2] then return -3 end
local off = tonumber(ARGV[3])
local t = redis.call('TYPE', KEYS[1]).ok
local function foreign()
  return t ~= 'string' or redis.call('STRLEN', KEYS[1]) ~= off + $TB
    or redis.call('GETRANGE', KEYS[1], off, off + 3) ~= string.sub(ARGV[4], 1, 4)
end
local function bits(cmd, op, value, first)
  local out, ops = {}, {}
  for i = first, #ARGV do
    ops[#ops + 1] = op; ops[#ops + 1] = 'u1'; ops[#ops + 1] = ARGV[i]
    if value then ops[#ops + 1] = value end
    if (i - first + 1) % 1000 == 0 or i == #ARGV then
      local got = redis.call(cmd, KEYS[1], unpack(ops))
      for j = 1, #got do out[#out + 1] = got[j] end
      ops = {}
    end
  end
  return table.concat(out)
end
"""

# Member write: ARGV[5] TTL seconds ('0': none), ARGV[6..] bit positions. A missing
# member key is created with the trailer; the write counter counts the call.
MEMBER_SET = lua(
    MEMBER_PRELUDE
    + """
if t == 'none' then
  redis.call('SETRANGE', KEYS[1], off, ARGV[4])
elseif foreign() then
  return -2
end
local old = bits('BITFIELD', 'SET', 1, 6)
redis.call('BITFIELD', KEYS[1], 'OVERFLOW', 'WRAP', 'INCRBY', 'i64', off * 8 + $COUNTER_BIT, 1)
if ARGV[5] ~= '0' then redis.call('EXPIRE', KEYS[1], ARGV[5]) end
return old
"""
)

# Member read: ARGV[5..] bit positions. 0: no member key (never written, or expired):
# absent.
MEMBER_TEST = lua(
    MEMBER_PRELUDE
    + """
if t == 'none' then return 0 end
if foreign() then return -2 end
return bits('BITFIELD_RO', 'GET', false, 5)
"""
)

# Both keys in one call: is the member key absent while the family (this generation) is intact?
MEMBER_ABSENT = """
return {redis.call('EXISTS', KEYS[1]), redis.call('GET', KEYS[2])}
"""

SCAN_COUNT = 1000  # keys SCAN examines per call (stats)
STATS_MAX_SCANS = 1000  # SCAN calls of one family stats run: ~1M keys examined at most
MEMORY_SAMPLES = 32  # members whose MEMORY USAGE is read (one pipeline) for the estimate


def _run(storage: Storage, script: str, segment: Segment, control: str, args: list, durable: bool):
    """A member script in one round trip, WAIT behind it when durable: (its reply, its
    shortfall). KEYS the member's and the control key; ARGV the accepted control values,
    the trailer's offset, then ``args`` (the positions last)."""
    keys = [segment.keys.bits, control]
    argv = [*_accepted(segment), segment.trailer_offset, *args]
    replies, short = storage.run_scripts(script, [evalsha_head(script, keys, argv)], durable)
    return storage.raise_errors(replies)[0], short


def _key_missing(segment: Segment, why: str) -> FilterKeyMissing:
    return FilterKeyMissing(
        f"Bloom filter family member {segment.name!r}: {why}. It cannot answer until "
        "the family is recreated (delete and create it, then refill its members)."
    )


_LOST = (
    "the family's control key is missing (Redis restarted without persistence, was "
    "flushed, or the family was deleted), so a missing member key cannot be told from a "
    "lost one"
)
_FOREIGN = "its Redis key does not match this family (another geometry, type or size)"
_STALE = (
    "the family was deleted (and created again) since this handle was made, so its key "
    "is nobody's; get the filter again (get_filter(name, member=...): cached metadata of "
    "other processes expires within METADATA_TTL)"
)


def control_value(segment: Segment) -> str:
    """The control key's value: names the family's generation (fingerprint:generation)."""
    if not segment.generation:
        return str(segment.fingerprint)
    return f"{segment.fingerprint}:{segment.generation}"


def _accepted(segment: Segment) -> list[str]:
    """Control values a member handle accepts: its generation's, the previous release's."""
    return [control_value(segment), str(segment.fingerprint)]


def _refused(segment: Segment, reply) -> None:
    """Raise for a script's refusal (-1 lost, -2 foreign key, -3 stale handle)."""
    if reply == -1:
        raise _key_missing(segment, _LOST)
    if reply == -2:
        raise _key_missing(segment, _FOREIGN)
    if reply == -3:
        raise _key_missing(segment, _STALE)


def _bits(reply) -> bytes:
    return reply if isinstance(reply, bytes) else str(reply).encode()


def member_set(
    storage: Storage, segment: Segment, control: str, flat: Sequence[int], ttl: int | None
) -> WriteResult:

    args = [segment.trailer(), int(ttl or 0), *map(int, flat)]
    reply, short = _run(storage, MEMBER_SET, segment, control, args, durable=True)
    _refused(segment, reply)  # it wrote nothing: not "short of replicas"
    old = _bits(reply)
    k = segment.num_hashes
    return WriteResult([b"0" in old[i : i + k] for i in range(0, len(old), k)], False, short)


def member_test(
    storage: Storage, segment: Segment, control: str, flat: Sequence[int]
) -> list[bool]:
    k = segment.num_hashes
    args = [segment.trailer()[:4], *map(int, flat)]  # the fingerprint, the positions
    reply, _short = _run(storage, MEMBER_TEST, segment, control, args, durable=False)
    if reply == 0:
        return [False] * (len(flat) // k)
    _refused(segment, reply)
    got = _bits(reply)
    return [b"0" not in got[i : i + k] for i in range(0, len(got), k)]


def member_absent(storage: Storage, segment: Segment, control: str) -> bool:
    """True when the member has no key and the family's control key exists (this
    handle's generation; another raises: the handle is stale)."""
    member, family = storage._eval(MEMBER_ABSENT, [segment.keys.bits, control], [])
    if family is None:
        return False
    if (family.decode() if isinstance(family, bytes) else str(family)) not in _accepted(segment):
        raise _key_missing(segment, _STALE)
    return not member


def delete_member(storage: Storage, segment: Segment) -> None:
    storage.unlink_matching(segment.bits_pattern, segment.keys.bits)


def create_control(storage: Storage, control: str, value: str) -> None:
    """The family's control key (no TTL), created with the row."""
    storage.command("SET", control, value)


def control_exists(storage: Storage, control: str) -> bool:
    return bool(storage.command("EXISTS", control))


def delete_family(storage: Storage, control: str, pattern: str, others: Sequence[str]) -> int:
    """The control key first (writers then refuse instead of recreating members), then
    every member key in batches, then ``others`` (the row's own keys: counters...)."""
    storage.command("UNLINK", control, *others)
    return storage.unlink_matching(pattern)


@dataclass(frozen=True)
class FamilyFigures:
    members: int  # member keys found (a lower bound when not ``complete``)
    complete: bool  # the SCAN reached the end of the keyspace
    memory_bytes: int | None  # estimated: mean MEMORY USAGE of a sample x members
    sampled: int  # members whose MEMORY USAGE (and BITCOUNT) was read
    control_present: bool
    fullest_bits: int | None  # the most bits set in a sampled member (None: none sampled)


def family_figures(
    storage: Storage,
    control: str,
    pattern: str,
    bitmap_bytes: int,
    max_scans: int = STATS_MAX_SCANS,
    samples: int = MEMORY_SAMPLES,
) -> FamilyFigures:
    """Member count, memory and fill at bounded cost: at most ``max_scans`` SCAN calls
    (COUNT 1000 each), then one pipeline: MEMORY USAGE and BITCOUNT (of the bitmap's
    ``bitmap_bytes``) of a uniform random sample (reservoir) of ``samples`` members found,
    and the control key's EXISTS."""
    count, scans, cursor = 0, 0, 0
    sample: list[bytes] = []
    rng = random.Random()
    while True:
        cursor, keys = storage.command("SCAN", cursor, "MATCH", pattern, "COUNT", SCAN_COUNT)
        scans += 1
        for key in keys:
            count += 1
            if len(sample) < samples:
                sample.append(key)
            else:
                j = rng.randrange(count)
                if j < samples:
                    sample[j] = key
        if int(cursor) == 0 or scans >= max_scans:
            break
    commands = [header(2, "EXISTS", control)]
    for key in sample:
        commands.append(header(5, "MEMORY", "USAGE", key, "SAMPLES", "0"))
        commands.append(header(4, "BITCOUNT", key, "0", str(bitmap_bytes - 1)))
    present, *replies = storage.sent_replies(commands)
    pairs = zip(replies[::2], replies[1::2], strict=True)  # (MEMORY USAGE, BITCOUNT)
    found = [(size, bits) for size, bits in pairs if size is not None]
    memory = 0 if count == 0 else None
    if found:
        memory = round(sum(size for size, _ in found) / len(found) * count)
    fullest = max((bits for _, bits in found), default=None)  # expired members: not there
    return FamilyFigures(count, int(cursor) == 0, memory, len(sample), bool(present), fullest)
