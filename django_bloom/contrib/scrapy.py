"""A Scrapy dupefilter backed by django-bloom filters (``pip install django-bloom[scrapy]``).

In the Scrapy project's settings (Scrapy's scheduler, or scrapy-redis's)::

    DUPEFILTER_CLASS = "django_bloom.contrib.scrapy.BloomDupeFilter"
    BLOOM_DJANGO_SETTINGS = "mysite.settings"  # django.setup() if not done yet
    BLOOM_FILTER = "crawl-requests"            # created on first use with:
    BLOOM_CAPACITY = 10_000_000
    BLOOM_ERROR_RATE = 1e-6
    BLOOM_SEGMENTS = 0                         # N: sharded over N segments (a cluster)
    BLOOM_CLAIM_SECONDS = 3600                 # how long a scheduled request is claimed
    BLOOM_CLAIM_CAPACITY = 1_000_000           # new requests per claim window and crawl
    BLOOM_DEBUG = False                        # log every filtered request

Scrapy's fingerprints: ``BLOOM_FILTER`` holds the requests that are **done** (written when
the response arrives). A request is scheduled only by the crawler whose **claim** answered
"new": each crawl claims in its own bitmaps, one per time slice of each segment, beside it
(same hash tag); a claim lasts ``BLOOM_CLAIM_SECONDS`` (up to 25% more). ``close`` (a
graceful stop) deletes this crawl's claims, so the next crawl fetches what it never did; a
killed crawl's expire. ``clear`` (scrapy-redis's flush) deletes every crawl's. A new request
is one round trip (``CHECK_AND_CLAIM``), one answered lately none (``RECENT``: nothing is
kept per URL), a response one; only the row is read on a worker thread (the ORM's rule).

Redis away: requests are deduplicated in this process (each page at most once per crawler,
up to ``BACKLOG`` fingerprints, then by the recent memory alone), counted as
``bloom_dupefilter/unavailable``, logged once per outage; Redis is tried again each second.
When it answers, what was fetched and scheduled meanwhile is written.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import struct
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from django.db import connections
from redis.exceptions import NoScriptError
from scrapy.dupefilters import RFPDupeFilter

from django_bloom.engine import format as fmt
from django_bloom.engine import hashing, sizing
from django_bloom.engine.segment import key_missing
from django_bloom.engine.transport.errors import redis_failure, reply_or_error
from django_bloom.engine.transport.packing import bulk, evalsha_head
from django_bloom.exceptions import FilterExists, FilterUnavailable

logger = logging.getLogger(__name__)

DEFAULT_FILTER = "scrapy-requests"
DEFAULT_CAPACITY = 10_000_000
DEFAULT_ERROR_RATE = 1e-6
DEFAULT_CLAIM_SECONDS = 3600
DEFAULT_CLAIM_CAPACITY = 1_000_000
CLAIM_SLICES = 4  # a claim lasts claim_seconds plus up to a quarter more
RETRY_SECONDS = 1.0  # while Redis is away, how often a request tries it again
CLOSE_WAIT_SECONDS = 3.0  # at close, how long Redis may take to come back for the backlog
RECENT = 16_384  # fingerprints per generation of the recent memory (two generations)
BACKLOG = 65_536  # fingerprints an outage keeps to write later (about 6 MB)
DONE, CLAIMED, NEW, NO_FILTER = 0, 1, 2, -1

# KEYS: the item's done segment, the claims prefix (same hash tag). ARGV: the trailer's
# offset and fingerprint, this crawl's id, slice seconds, slices, then the done and the
# claim positions (big-endian u32). Returns DONE, CLAIMED (by a live crawl), NEW, NO_FILTER.
CHECK_AND_CLAIM = """
local function all_set(key, blob)
  for i = 1, #blob, 4 do
    if redis.call('GETBIT', key, (struct.unpack('>I4', blob, i))) == 0 then return false end
  end
  return true
end
if redis.call('GETRANGE', KEYS[1], ARGV[1], ARGV[1] + 3) ~= ARGV[2] then return -1 end
if all_set(KEYS[1], ARGV[6]) then return 0 end
local now, width, slices = tonumber(redis.call('TIME')[1]), tonumber(ARGV[4]), tonumber(ARGV[5])
local epoch, crawls = math.floor(now / width), KEYS[2] .. 'crawls'
for _, crawl in ipairs(redis.call('ZRANGEBYSCORE', crawls, now, '+inf')) do
  for e = epoch - slices, epoch do
    if all_set(KEYS[2] .. crawl .. ':' .. e, ARGV[7]) then return 1 end
  end
end
local key, lasts = KEYS[2] .. ARGV[3] .. ':' .. epoch, (slices + 1) * width
local first = redis.call('EXISTS', key) == 0  -- this crawl's first claim in this slice
for i = 1, #ARGV[7], 4 do redis.call('SETBIT', key, struct.unpack('>I4', ARGV[7], i), 1) end
if first then
  redis.call('EXPIRE', key, lasts)
  redis.call('ZREMRANGEBYSCORE', crawls, '-inf', now)
  redis.call('ZADD', crawls, (epoch + slices + 1) * width, ARGV[3])
  redis.call('EXPIRE', crawls, lasts)
end
return 2
"""


def setup_django(settings_module: str | None) -> None:
    """``django.setup()`` with ``settings_module`` unless Django is set up already."""
    from django.apps import apps

    if apps.ready:
        return
    if settings_module:
        os.environ.setdefault("DJANGO_SETTINGS_MODULE", settings_module)
    import django

    django.setup()


def claim_options(claim_seconds: int) -> dict[str, int]:
    """Slices whose window is at least ``claim_seconds`` (at most 4 slices)."""
    if isinstance(claim_seconds, bool) or not isinstance(claim_seconds, int) or claim_seconds < 1:
        raise ValueError(f"BLOOM_CLAIM_SECONDS must be an integer >= 1, got {claim_seconds!r}")
    slices = min(CLAIM_SLICES, claim_seconds)
    return {"slices": slices, "slice_seconds": -(-claim_seconds // slices)}


class BloomDupeFilter(RFPDupeFilter):
    """``DUPEFILTER_CLASS``: done request fingerprints in a django-bloom filter, claims
    beside it, one round trip per new request."""

    def __init__(
        self,
        filter_name: str = DEFAULT_FILTER,
        *,
        capacity: int = DEFAULT_CAPACITY,
        error_rate: float = DEFAULT_ERROR_RATE,
        segments: int = 0,
        claim_seconds: int = DEFAULT_CLAIM_SECONDS,
        claim_capacity: int = DEFAULT_CLAIM_CAPACITY,
        debug: bool = False,
        fingerprinter: Any = None,
        stats: Any = None,
    ) -> None:
        super().__init__(None, debug, fingerprinter=fingerprinter)
        self.filter_name = filter_name
        self.spec: dict[str, Any] = {"capacity": capacity, "error_rate": error_rate}
        if segments:
            self.spec.update(layout="sharded", options={"segments": segments})
        self.claim_options = claim_options(claim_seconds)
        self.claim_capacity = claim_capacity
        self.stats = stats
        self.crawl_id = uuid.uuid4().hex[:12]  # this crawl's claims
        self.releases = True  # at close; not under scrapy-redis (its queue keeps them)
        self._done: Any = None
        self._recent: set[bytes] = set()  # answered for good lately (let through, or done)
        self._older: set[bytes] = set()  # the generation before (RECENT each)
        self._late: dict[bytes, bool] = {}  # while Redis is away: fingerprint -> fetched?
        self._offline_until = 0.0  # monotonic time before which Redis is not tried
        self._warned = ""  # "outage" (logged), "full" (the backlog's end logged too)
        self._closed = False
        # The filter's row is read on this thread: the ORM refuses Scrapy's event loop.
        self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="bloom-dupefilter")

    @classmethod
    def from_crawler(cls, crawler: Any) -> BloomDupeFilter:
        from scrapy import signals

        settings = crawler.settings
        setup_django(settings.get("BLOOM_DJANGO_SETTINGS"))
        dupefilter = cls(
            settings.get("BLOOM_FILTER") or DEFAULT_FILTER,
            capacity=settings.getint("BLOOM_CAPACITY", DEFAULT_CAPACITY),
            error_rate=settings.getfloat("BLOOM_ERROR_RATE", DEFAULT_ERROR_RATE),
            segments=settings.getint("BLOOM_SEGMENTS", 0),
            claim_seconds=settings.getint("BLOOM_CLAIM_SECONDS", DEFAULT_CLAIM_SECONDS),
            claim_capacity=settings.getint("BLOOM_CLAIM_CAPACITY", DEFAULT_CLAIM_CAPACITY),
            debug=settings.getbool("BLOOM_DEBUG") or settings.getbool("DUPEFILTER_DEBUG"),
            fingerprinter=crawler.request_fingerprinter,
            stats=crawler.stats,
        )
        crawler.signals.connect(dupefilter.request_done, signal=signals.response_received)
        crawler.signals.connect(dupefilter.close, signal=signals.spider_closed)
        return dupefilter

    @classmethod
    def from_spider(cls, spider: Any) -> BloomDupeFilter:
        """scrapy-redis's scheduler (at open). Its queue in Redis holds what was claimed:
        a stop keeps the claims (SCHEDULER_PERSIST resumes them), its flush clears them."""
        dupefilter = cls.from_crawler(spider.crawler)
        dupefilter.releases = False
        return dupefilter

    # -- the filter and its claims ----------------------------------------------------
    def _call(self, function: Callable[[], Any]) -> Any:
        try:
            asyncio.get_running_loop()
        except RuntimeError:  # not in an event loop (the worker itself, a script)
            return function()
        return self._worker.submit(function).result()

    def _load(self) -> Any:
        from django_bloom import create_filter, get_filter

        try:  # refused before anything is written when the row exists
            return create_filter(
                self.filter_name,
                description="Scrapy request fingerprints (django_bloom.contrib.scrapy)",
                **self.spec,
            )
        except FilterExists:  # an earlier crawl made it, or another crawler meanwhile
            return get_filter(self.filter_name)

    def _filter(self) -> Any:
        """The done filter, and per segment what a claim call needs (once per handle)."""
        if self._done is None:
            done = self._call(self._load)
            slices, width = self.claim_options["slices"], self.claim_options["slice_seconds"]
            segments = done.layout.segments
            per_slice = -(-self.claim_capacity // (slices * len(segments)))
            rate = self.spec["error_rate"] / (slices + 1)  # a check reads up to W + 1 slices
            geometry = sizing.standard_geometry(per_slice, rate)
            self._claim_positions = hashing.standard_positioner(*geometry)
            self._calls = []  # per segment: keys, first arguments, the EVALSHA head
            for segment in segments:
                keys = [segment.keys.bits, segment.keys.bits[: -len("bits")] + "claims:"]
                args = [segment.trailer_offset, fmt.fingerprint_bytes(segment.fingerprint)]
                args += [self.crawl_id, width, slices]
                head = evalsha_head(CHECK_AND_CLAIM, keys, args, more=2)
                self._calls.append((keys, args, head))
            self._done = done
        return self._done

    def _claim(self, fingerprint: bytes) -> int:
        """DONE, CLAIMED or NEW (claimed now, by this crawl): one round trip."""
        done = self._filter()
        segments, storage = done.layout.segments, done.storage
        size, k = segments[0].num_bits, segments[0].num_hashes
        pair = done.hashes([fingerprint])
        flat = done.positions(pair)
        j = flat[0] // size
        keys, args, head = self._calls[j]
        claims = self._claim_positions(*pair[0])
        blobs = [struct.pack(f">{k}I", *(p - j * size for p in flat))]
        blobs.append(struct.pack(f">{len(claims)}I", *claims))
        payload = head + bulk(blobs[0]) + bulk(blobs[1])
        reply = storage.conn.send(payload, reply_or_error, False, keys[0])
        if isinstance(reply, NoScriptError):  # a restart, SCRIPT FLUSH: EVAL caches it again
            reply = storage.conn.eval(CHECK_AND_CLAIM, keys, args + blobs)
        if isinstance(reply, Exception):
            raise redis_failure(storage.alias, reply)
        if reply == NO_FILTER:  # deleted or resized: the row is read again next time
            self._done = None
            raise key_missing(segments[j])
        return reply

    def _release(self, crawl: str) -> None:
        """Delete ``crawl``'s claims ("": every crawl's) in every segment (a slot each)."""
        storage, width = self._filter().storage, self.claim_options["slice_seconds"]
        epoch = int(time.time()) // width  # and a slice either side: clocks differ
        epochs = range(epoch - self.claim_options["slices"] - 2, epoch + 2)
        for prefix in (keys[1] for keys, _args, _head in self._calls):
            listed = [prefix + "crawls"]  # its own id may stay: with no keys, it claims nothing
            crawls = [crawl.encode()] if crawl else storage.command("ZRANGE", *listed, 0, -1)
            keys = [f"{prefix}{c.decode()}:{e}" for c in crawls for e in epochs]
            storage.command("DEL", *(keys if crawl else [*listed, *keys]))

    def _record_late(self) -> None:
        """Write what this process fetched or let through while Redis was away."""
        count = len(self._late)
        fetched = sorted(fingerprint for fingerprint, done in self._late.items() if done)
        self._filter().add_many(fetched)
        self._late = {fp: done for fp, done in self._late.items() if not done}  # written
        for fingerprint in sorted(self._late):
            self._claim(fingerprint)
            del self._late[fingerprint]
        self._count("bloom_dupefilter/recorded_late", count)
        logger.warning(
            "Bloom filter %r answers again: recorded the %d requests fetched or "
            "scheduled while it was away",
            self.filter_name,
            count,
        )

    # -- Scrapy's calls -----------------------------------------------------------
    def open(self) -> None:
        with contextlib.suppress(FilterUnavailable):  # said so; the first request tries again
            self._redis(lambda _: self._filter(), None)

    def request_seen(self, request: Any) -> bool:
        fingerprint = self.fingerprinter.fingerprint(request)
        if fingerprint in self._recent or fingerprint in self._older or fingerprint in self._late:
            return True
        try:
            verdict = self._redis(self._claim, fingerprint)
        except FilterUnavailable:  # deduplicate in this process, write it later
            self._count("bloom_dupefilter/unavailable")
            self._keep(fingerprint, False)
            verdict = NEW
        if verdict != CLAIMED:
            self._remember(fingerprint)
        return verdict != NEW

    def request_done(self, request: Any) -> None:
        """A response arrived (``response_received``): record the request as done."""
        fingerprint = self.fingerprinter.fingerprint(request)
        self._remember(fingerprint)
        try:
            self._redis(lambda fingerprint: self._filter().add(fingerprint), fingerprint)
        except FilterUnavailable:
            self._keep(fingerprint, True)

    def clear(self) -> None:
        """scrapy-redis's flush (its queue emptied): every crawl's claims go; what was
        fetched stays done (``manage.py bloom clear <BLOOM_FILTER>`` forgets it)."""
        self._redis(self._release, "")

    def _remember(self, fingerprint: bytes) -> None:
        if len(self._recent) >= RECENT:
            self._older, self._recent = self._recent, set()
        self._recent.add(fingerprint)

    def _keep(self, fingerprint: bytes, fetched: bool) -> None:
        """Into an outage's backlog, unless it holds BACKLOG already (then counted)."""
        if len(self._late) < BACKLOG or fingerprint in self._late:
            self._late[fingerprint] = fetched or self._late.get(fingerprint, False)
            return
        self._count("bloom_dupefilter/not_recorded")
        if self._warned != "full":
            self._warned = "full"
            logger.warning(
                "Bloom filter %r unavailable: %d requests kept to record later; the next are "
                "not recorded, deduplicated by this crawler's recent memory alone",
                self.filter_name,
                BACKLOG,
            )

    def _redis(self, function: Callable[[Any], Any], argument: Any) -> Any:
        """``function(argument)`` after the outage's backlog; FilterUnavailable while Redis
        is away (tried at most once a second; in between, no network wait)."""
        if time.monotonic() < self._offline_until:
            raise FilterUnavailable("waiting before trying Redis again")
        try:
            if self._late:
                self._record_late()
            result = function(argument)
        except FilterUnavailable as exc:
            self._offline_until = time.monotonic() + RETRY_SECONDS
            if not self._warned:
                logger.warning(
                    "Bloom filter %r unavailable (%s): deduplicating in this process until "
                    "it answers again (other crawlers may fetch the same pages meanwhile)",
                    self.filter_name,
                    exc,
                )
                self._warned = "outage"
            raise
        self._warned = ""  # the next outage is logged again
        return result

    def _count(self, key: str, count: int = 1) -> None:
        if self.stats is not None:
            self.stats.inc_value(key, count)

    def close(self, reason: str = "finished") -> None:
        """Write the outage's backlog (waiting up to CLOSE_WAIT_SECONDS for Redis), then
        release this crawl's claims: the next crawl fetches what this one never did.
        Runs once (Scrapy's scheduler calls it, then ``spider_closed``: scrapy-redis's never)."""
        if self._closed:
            return
        self._closed = True
        super().close(reason)
        self._worker.submit(self._finish).result()
        self._worker.shutdown()

    def _finish(self) -> None:
        deadline = time.monotonic() + CLOSE_WAIT_SECONDS
        try:
            while self._late:
                try:
                    self._record_late()
                except FilterUnavailable:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.2)
            if self.releases and self._done is not None:
                self._release(self.crawl_id)
        except FilterUnavailable as exc:
            logger.warning(
                "Bloom filter %r still unavailable (%s): %d fetched requests are not "
                "recorded (a later crawl fetches them again), claims not released",
                self.filter_name,
                exc,
                sum(self._late.values()),
            )
        finally:
            connections.close_all()
