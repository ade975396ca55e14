"""A filter's bits read and OR-ed in range by range: dumps and merges (``transfer.py``).

A mixin of ``engine/storage.Storage`` (it uses ``range_replies`` and ``_eval``). Every
command moves at most one chunk (a few MiB), so Redis serves other clients in between,
and takes ``SLOW_COMMAND_TIMEOUT`` (a chunk may take longer than a bit operation).
"""

from __future__ import annotations

from django_bloom.engine import format as fmt
from django_bloom.engine.segment import Segment, key_missing
from django_bloom.engine.transport.connections import slow
from django_bloom.exceptions import BloomError

# OR bits into the live key, atomically with the check that it is this filter's and is not
# being rebuilt: an add either comes before (read back with the range) or after (sets bits
# on top). KEYS: the live key, two scratch keys and the rebuild lock (one hash tag: one slot).
# ARGV: trailer offset, fingerprint (4 bytes), byte offset, the bits, a write stamp and its
# bit offset (a mirror sees a new version, as after any write). -1 not ours, -2 rebuilding.
OR_RANGE = fmt.lua("""
local t = tonumber(ARGV[1])
if redis.call('TYPE', KEYS[1]).ok ~= 'string' or redis.call('STRLEN', KEYS[1]) ~= t + $TB
    or redis.call('GETRANGE', KEYS[1], t, t + 3) ~= ARGV[2] then return -1 end
if redis.call('EXISTS', KEYS[4]) == 1 then return -2 end
local at = tonumber(ARGV[3])
redis.call('SET', KEYS[2], ARGV[4])
redis.call('SET', KEYS[3], redis.call('GETRANGE', KEYS[1], at, at + #ARGV[4] - 1))
redis.call('BITOP', 'OR', KEYS[2], KEYS[2], KEYS[3])
redis.call('SETRANGE', KEYS[1], at, redis.call('GET', KEYS[2]))
redis.call('DEL', KEYS[2], KEYS[3])
redis.call('BITFIELD', KEYS[1], 'SET', 'u24', ARGV[6], ARGV[5],
  'OVERFLOW', 'WRAP', 'INCRBY', 'i64', t * 8 + $COUNTER_BIT, 1)
return 1
""")


class TransferCommands:
    """Range reads and OR-writes of whole bitmaps (mixed into Storage)."""

    @slow
    def read_checked(self, segment: Segment, start: int, stop: int) -> bytes:
        """Bitmap bytes ``start`` to ``stop`` (exclusive), in the pipeline that checks the
        key's length and fingerprint (FilterKeyMissing: gone, resized or not ours)."""
        data = self.range_replies(segment, stop - start, "getrange", start, stop)[0]
        if len(data) != stop - start:
            raise key_missing(segment)
        return data

    @slow
    def or_range(self, segment: Segment, start: int, data: bytes) -> None:
        """OR ``data`` into the live bitmap at byte ``start`` (``OR_RANGE``)."""
        keys, t = segment.keys, segment.trailer_offset
        scratch = [f"{keys.build}:or", f"{keys.build}:or2"]
        args = [t, fmt.fingerprint_bytes(segment.fingerprint), start, data, fmt.new_stamp()]
        outcome = self._eval(
            OR_RANGE, [keys.bits, *scratch, keys.lock], [*args, t * 8 + fmt.STAMP_BIT]
        )
        if outcome == -1:
            raise key_missing(segment)
        if outcome == -2:
            raise BloomError(
                f"a rebuild or an import of {segment.name!r} began during the merge: merge "
                "again once it is done"
            )
