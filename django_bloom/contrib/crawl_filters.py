"""The Redis side of the Scrapy dupefilter (``contrib/scrapy.py``): the done filter, the
claims beside it, and the script that answers a new request in one round trip.

``BLOOM_FILTER`` holds the requests that are **done** (fetched). A request is scheduled
only by the crawler whose **claim** answered "new": each crawl claims in its own bitmaps,
one per time slice of each segment, beside the done filter (same hash tag); a claim lasts
``BLOOM_CLAIM_SECONDS`` (up to 25% more). A done filter whose kind sets k bits of a
bitmap (``BIT_KINDS``) is read by the script itself: done? and the claim in one call,
which also writes the done marks of the responses since the last call. Any other kind
(``rotating``: a re-crawl window; ``counting``: URLs can be forgotten) answers "done?"
through its own ``contains`` (a round trip before the claim) and takes its done marks in
batches (``add_many``).
"""

from __future__ import annotations

import struct
import time
from collections.abc import Sequence
from typing import Any

from redis.exceptions import NoScriptError

from django_bloom.engine import format as fmt
from django_bloom.engine import hashing, sizing
from django_bloom.engine.segment import key_missing
from django_bloom.engine.transport.errors import redis_failure, reply_or_error
from django_bloom.engine.transport.packing import bulk, evalsha_head

SLICES = 4  # a claim (a re-crawl window) lasts N seconds plus up to a quarter more
BIT_KINDS = ("standard", "blocked", "sharded")  # contains: all k bits of one segment set
DONE, CLAIMED, NEW, NO_FILTER = 0, 1, 2, -1

# KEYS: the item's done segment (or the done filter's primary key), the claims prefix
# (same hash tag). ARGV: the trailer's offset ("": no done check here) and fingerprint,
# this crawl's id, slice seconds, slices, the done and the claim positions (big-endian
# u32), the done marks' positions and a write stamp. The marks are written as an add
# writes them (the trailer's stamp and write counter too). Returns {DONE, CLAIMED (by a
# live crawl), NEW or NO_FILTER; "" or the trailer's flags ":" the marks' old bits}.
CHECK_AND_CLAIM = fmt.lua("""
local function all_set(key, blob)
  for i = 1, #blob, 4 do
    if redis.call('GETBIT', key, (struct.unpack('>I4', blob, i))) == 0 then return false end
  end
  return true
end
local function set_ops(ops, blob)  -- BITFIELD's SET u1 <p> 1 for each position of blob
  for i = 1, #blob, 4 do
    local n = #ops
    ops[n + 1], ops[n + 2] = 'SET', 'u1'
    ops[n + 3], ops[n + 4] = (struct.unpack('>I4', blob, i)), 1
  end
  return unpack(ops)
end
local marked = ''
if ARGV[1] ~= '' then
  local t = ARGV[1] * 8
  if redis.call('GETRANGE', KEYS[1], ARGV[1], ARGV[1] + 3) ~= ARGV[2] then return {-1, ''} end
  if ARGV[8] ~= '' then
    local old = redis.call('BITFIELD', KEYS[1], set_ops({'GET', 'u8', t + $FLAGS_BIT, 'SET',
      'u24', t + $STAMP_BIT, ARGV[9], 'OVERFLOW', 'WRAP', 'INCRBY', 'i64', t + $COUNTER_BIT, 1},
      ARGV[8]))
    marked = old[1] .. ':' .. table.concat(old, '', 4)
  end
  if all_set(KEYS[1], ARGV[6]) then return {0, marked} end
end
local now, width, slices = tonumber(redis.call('TIME')[1]), tonumber(ARGV[4]), tonumber(ARGV[5])
local epoch, crawls = math.floor(now / width), KEYS[2] .. 'crawls'
for _, crawl in ipairs(redis.call('ZRANGEBYSCORE', crawls, now, '+inf')) do
  for e = epoch - slices, epoch do
    if all_set(KEYS[2] .. crawl .. ':' .. e, ARGV[7]) then return {1, marked} end
  end
end
local key, lasts = KEYS[2] .. ARGV[3] .. ':' .. epoch, (slices + 1) * width
local first = redis.call('EXISTS', key) == 0  -- this crawl's first claim in this slice
redis.call('BITFIELD', key, set_ops({}, ARGV[7]))
if first then
  redis.call('EXPIRE', key, lasts)
  redis.call('ZREMRANGEBYSCORE', crawls, '-inf', now)
  redis.call('ZADD', crawls, (epoch + slices + 1) * width, ARGV[3])
  redis.call('EXPIRE', crawls, lasts)
end
return {2, marked}
""").replace("$STAMP_BIT", str(fmt.STAMP_BIT))


def claim_options(claim_seconds: int) -> dict[str, int]:
    """Slices whose window is at least ``claim_seconds`` (at most 4 slices)."""
    if isinstance(claim_seconds, bool) or not isinstance(claim_seconds, int) or claim_seconds < 1:
        raise ValueError(f"BLOOM_CLAIM_SECONDS must be an integer >= 1, got {claim_seconds!r}")
    slices = min(SLICES, claim_seconds)
    return {"slices": slices, "slice_seconds": -(-claim_seconds // slices)}


def done_spec(capacity: int, error_rate: float, segments: int, recrawl_seconds: int) -> dict:
    """``create_filter``'s arguments for the done filter: a Bloom filter (sharded over
    ``segments``), or with ``recrawl_seconds`` a rotating window of SLICES slices, each for
    ``capacity`` pages at the rate that keeps the window's (W + 1 slices read) ``error_rate``."""
    spec: dict[str, Any] = {"capacity": capacity, "error_rate": error_rate}
    if recrawl_seconds < 0 or (recrawl_seconds and segments):
        raise ValueError(
            f"BLOOM_RECRAWL_SECONDS must be 0 (off) or seconds, got {recrawl_seconds!r}, and "
            "is one slot: not with BLOOM_SEGMENTS"
        )
    if recrawl_seconds:
        options = {"slices": SLICES, "slice_seconds": -(-recrawl_seconds // SLICES)}
        spec.update(layout="rotating", options=options, error_rate=error_rate / (SLICES + 1))
    elif segments:
        spec.update(layout="sharded", options={"segments": segments})
    return spec


def _blob(positions: Sequence[int]) -> bytes:
    return struct.pack(f">{len(positions)}I", *positions)


class CrawlFilters:
    """A crawl's view of the done filter (a django-bloom ``Filter``) and of the claims."""

    def __init__(
        self, done: Any, crawl_id: str, options: dict[str, int], capacity: int, rate: float
    ) -> None:
        self.done, self.crawl_id, self.options = done, crawl_id, options
        self.bits = done.meta.layout in BIT_KINDS  # else "done?" is the kind's own contains
        slices, segments = options["slices"], done.layout.segments
        per_slice = -(-capacity // (slices * len(segments)))
        geometry = sizing.standard_geometry(per_slice, rate / (slices + 1))  # W + 1 slices read
        self.claim_positions = hashing.standard_positioner(*geometry)
        self.positions = done.layout.positioner()  # the done filter's, as ``done.positions``
        self.calls = []  # per segment: keys, first arguments, the EVALSHA head
        for segment in segments if self.bits else segments[:1]:
            keys = [segment.keys.bits, segment.keys.bits[: -len("bits")] + "claims:"]
            args = [segment.trailer_offset, fmt.fingerprint_bytes(segment.fingerprint)]
            args = (args if self.bits else ["", b""]) + [crawl_id, options["slice_seconds"], slices]
            self.calls.append((keys, args, evalsha_head(CHECK_AND_CLAIM, keys, args, more=4)))

    def claim(self, fingerprint: bytes, marks: list[bytes]) -> tuple[int, list[bytes]]:
        """DONE, CLAIMED or NEW (claimed now, by this crawl), and the done ``marks``
        written: one round trip, where the script writes them too (a bitmap in one segment;
        else the caller writes them in batches)."""
        done = self.done
        pair = done.hashes([fingerprint])[0]
        if not self.bits:
            if done.contains(fingerprint):  # its kind's own round trip
                return DONE, []
            flat, j, riding = [], 0, []
        else:
            flat, size = self.positions(*pair), done.layout.segments[0].num_bits
            k = done.layout.segment.num_hashes  # at most 1,900 // k: Lua's unpack takes ~8,000
            j, riding = flat[0] // size, marks[: 1900 // k] if len(self.calls) == 1 else []
            flat = [p - j * size for p in flat]
        keys, args, head = self.calls[j]
        blobs = [_blob(flat), _blob(self.claim_positions(*pair)), b"", b""]
        if riding:  # and a write stamp, as an add sets
            positions = [p for mark in done.hashes(riding) for p in self.positions(*mark)]
            blobs[2:] = _blob(positions), b"%d" % fmt.new_stamp()
        payload = head + b"".join(bulk(blob) for blob in blobs)
        reply = done.storage.conn.send(payload, reply_or_error, bool(riding), keys[0])
        if isinstance(reply, NoScriptError):  # a restart, SCRIPT FLUSH: EVAL caches it again
            reply = done.storage.conn.eval(CHECK_AND_CLAIM, keys, args + blobs)
        if isinstance(reply, Exception):
            raise redis_failure(done.storage.alias, reply)
        verdict, marked = reply
        if verdict == NO_FILTER:  # deleted or resized: the caller reads the row again
            raise key_missing(done.layout.segments[j])
        if marked:
            self._marked(riding, marked)
        return verdict, riding

    def _marked(self, written: list[bytes], reply: bytes) -> None:
        """Done marks written by the script: count the new ones; if a rebuild runs, add
        them again through the filter, which journals them for it."""
        flags, _, old = reply.partition(b":")
        k = self.done.layout.segment.num_hashes
        self.done.count_new(sum(b"0" in old[i : i + k] for i in range(0, len(old), k)))
        if int(flags) & fmt.FLAG_REBUILDING:
            self.done.add_many(written)

    def release(self, crawl: str) -> None:
        """Delete ``crawl``'s claims ("": every crawl's) in every segment (a slot each)."""
        storage, width = self.done.storage, self.options["slice_seconds"]
        epoch = int(time.time()) // width  # and a slice either side: clocks differ
        epochs = range(epoch - self.options["slices"] - 2, epoch + 2)
        for prefix in (keys[1] for keys, _args, _head in self.calls):
            listed = [prefix + "crawls"]  # its own id may stay: with no keys, it claims nothing
            crawls = [crawl.encode()] if crawl else storage.command("ZRANGE", *listed, 0, -1)
            keys = [f"{prefix}{c.decode()}:{e}" for c in crawls for e in epochs]
            storage.command("DEL", *(keys if crawl else [*listed, *keys]))
