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

Fingerprints are ``crawler.request_fingerprinter``'s (Scrapy's own), in two places:

- ``BLOOM_FILTER`` holds the requests that are **done**: written when the
  response arrives (any status, after Scrapy's retries). A later crawl skips them.
- **Claims**: a request is scheduled only by the crawler whose claim answered
  "new", so crawlers sharing the filters never both fetch a page. Each crawl
  claims in its own bitmaps, one per time slice (``CLAIM_SLICES``) of each
  segment of ``BLOOM_FILTER``, beside it (same hash tag: same cluster slot);
  a claim lasts ``BLOOM_CLAIM_SECONDS`` (up to 25% more). ``close`` (a graceful
  stop) deletes this crawl's bitmaps: what it claimed and never fetched is
  left to the next crawl at once; a killed crawl's claims expire.
  ``clear`` (scrapy-redis's flush, its queue emptied) deletes every crawl's.

A new request costs one round trip: one script checks the done filter and claims
only if not done (``CHECK_AND_CLAIM``). A request this crawler answered lately
costs none (``RECENT``: a bounded memory, nothing kept per URL); a response one.
Only loading the filter row (at open) runs on a worker thread (the ORM refuses to
run in Scrapy's event loop). A filter's false positive skips a new request
(about ``BLOOM_ERROR_RATE`` of them).

Redis away: requests are deduplicated in this process (each page fetched at most
once by this crawler, up to ``BACKLOG`` fingerprints, then by the recent memory
alone: ``bloom_dupefilter/not_recorded``, logged once), counted as
``bloom_dupefilter/unavailable``, logged once per outage; Redis is tried again
each second. When it answers, what was fetched and scheduled meanwhile is written
(``bloom_dupefilter/recorded_late``), so other crawlers skip it.
"""

from __future__ import annotations

import asyncio
import logging
import os
import struct
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from redis.exceptions import NoScriptError, ResponseError
from scrapy.dupefilters import RFPDupeFilter

from django_bloom.engine import format as fmt
from django_bloom.engine import hashing, sizing
from django_bloom.engine.segment import key_missing
from django_bloom.engine.transport.errors import redis_failure
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
local at = tonumber(ARGV[1])
if redis.call('GETRANGE', KEYS[1], at, at + 3) ~= ARGV[2] then return -1 end
if all_set(KEYS[1], ARGV[6]) then return 0 end
local now, width, slices = tonumber(redis.call('TIME')[1]), tonumber(ARGV[4]), tonumber(ARGV[5])
local epoch, crawls = math.floor(now / width), KEYS[2] .. 'crawls'
redis.call('ZREMRANGEBYSCORE', crawls, '-inf', now)
for _, crawl in ipairs(redis.call('ZRANGE', crawls, 0, -1)) do
  for e = epoch - slices, epoch do
    if all_set(KEYS[2] .. crawl .. ':' .. e, ARGV[7]) then return 1 end
  end
end
local key, lasts = KEYS[2] .. ARGV[3] .. ':' .. epoch, (slices + 1) * width
for i = 1, #ARGV[7], 4 do redis.call('SETBIT', key, struct.unpack('>I4', ARGV[7], i), 1) end
redis.call('EXPIRE', key, lasts)
redis.call('ZADD', crawls, (epoch + slices + 1) * width, ARGV[3])
redis.call('EXPIRE', crawls, lasts)
return 2
"""
# KEYS: the claims prefix. ARGV: a crawl's id ("": every crawl), slice seconds, slices.
RELEASE = """
local width, slices, crawls = tonumber(ARGV[2]), tonumber(ARGV[3]), KEYS[1] .. 'crawls'
local epoch = math.floor(tonumber(redis.call('TIME')[1]) / width)
local ids = {ARGV[1]}
if ARGV[1] == '' then ids = redis.call('ZRANGE', crawls, 0, -1) end
for _, crawl in ipairs(ids) do
  for e = epoch - slices - 1, epoch do redis.call('DEL', KEYS[1] .. crawl .. ':' .. e) end
  redis.call('ZREM', crawls, crawl)
end
return #ids
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


def _in_event_loop() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def claim_options(claim_seconds: int) -> dict[str, int]:
    """Slices whose window is at least ``claim_seconds`` (at most 4 slices)."""
    if isinstance(claim_seconds, bool) or not isinstance(claim_seconds, int) or claim_seconds < 1:
        raise ValueError(f"BLOOM_CLAIM_SECONDS must be an integer >= 1, got {claim_seconds!r}")
    slices = min(CLAIM_SLICES, claim_seconds)
    return {"slices": slices, "slice_seconds": -(-claim_seconds // slices)}


def _reply(conn: Any) -> Any:
    try:
        return conn.read_response()
    except ResponseError as exc:  # NOSCRIPT among them: returned, not raised
        return exc


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
        self.capacity = capacity
        self.error_rate = error_rate
        self.segments = segments
        self.claim_options = claim_options(claim_seconds)
        self.claim_capacity = claim_capacity
        self.stats = stats
        self.crawl_id = uuid.uuid4().hex[:12]  # this crawl's claims
        self.releases = True  # at close; not under scrapy-redis (its queue keeps them)
        self._done: Any = None
        self._recent: set[bytes] = set()  # answered for good lately (let through, or done)
        self._older: set[bytes] = set()
        # While Redis is away: fetched (done) and let through (claimed) fingerprints.
        self._late_done: set[bytes] = set()
        self._late_claimed: set[bytes] = set()
        self._offline_until = 0.0  # monotonic time before which Redis is not tried
        self._warned = ""  # "outage" (logged), "full" (the backlog's end logged too)
        self._closed = False
        # The ORM refuses to run inside a running event loop (Scrapy's default
        # asyncio reactor): the filter's row is read on this thread.
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
        # scrapy-redis's scheduler never calls close(): the backlog is written then.
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
    def _call(self, function: Callable[..., Any], *args: Any) -> Any:
        if _in_event_loop():
            return self._worker.submit(function, *args).result()
        return function(*args)

    def _load(self) -> Any:
        from django_bloom import create_filter, get_filter
        from django_bloom.exceptions import FilterNotFound

        try:
            return get_filter(self.filter_name)
        except FilterNotFound:
            pass
        spec: dict[str, Any] = {"capacity": self.capacity, "error_rate": self.error_rate}
        if self.segments:
            spec.update(layout="sharded", options={"segments": self.segments})
        try:
            return create_filter(
                self.filter_name,
                description="Scrapy request fingerprints (django_bloom.contrib.scrapy)",
                **spec,
            )
        except FilterExists:  # another crawler created it meanwhile
            return get_filter(self.filter_name)

    def _filter(self) -> Any:
        """The done filter, and per segment what a claim call needs (once per handle)."""
        if self._done is None:
            done = self._call(self._load)
            slices, width = self.claim_options["slices"], self.claim_options["slice_seconds"]
            segments = done.layout.segments
            per_slice = -(-self.claim_capacity // (slices * len(segments)))
            self._claim_positions = hashing.standard_positioner(
                *sizing.standard_geometry(per_slice, self.error_rate / (slices + 1))
            )
            self._prefixes = [s.keys.bits[: -len("bits")] + "claims:" for s in segments]
            self._calls = []  # per segment: keys, first arguments, the EVALSHA head
            for segment, prefix in zip(segments, self._prefixes, strict=True):
                keys = [segment.keys.bits, prefix]
                args = [segment.trailer_offset, fmt.fingerprint_bytes(segment.fingerprint)]
                args += [self.crawl_id, width, slices]
                head = evalsha_head(CHECK_AND_CLAIM, keys, args, more=2)
                self._calls.append((keys, args, head))
            self._done = done
        return self._done

    def _claim(self, fingerprint: bytes) -> int:
        """DONE, CLAIMED or NEW (claimed now, by this crawl): one round trip."""
        done = self._filter()
        segments = done.layout.segments
        size, k = segments[0].num_bits, segments[0].num_hashes
        pair = done.hashes([fingerprint])
        flat = done.positions(pair)
        j = flat[0] // size
        keys, args, head = self._calls[j]
        claims = self._claim_positions(*pair[0])
        blobs = [struct.pack(f">{k}I", *(p - j * size for p in flat))]
        blobs.append(struct.pack(f">{len(claims)}I", *claims))
        storage = done.storage
        reply = storage.conn.send(head + bulk(blobs[0]) + bulk(blobs[1]), _reply, False, keys[0])
        if isinstance(reply, NoScriptError):  # a restart, SCRIPT FLUSH: EVAL caches it again
            reply = storage.conn.eval(CHECK_AND_CLAIM, keys, args + blobs)
        if isinstance(reply, Exception):
            raise redis_failure(storage.alias, reply)
        if reply == NO_FILTER:  # deleted or resized: the row is read again next time
            self._done = None
            raise key_missing(segments[j])
        return reply

    def _release(self, crawl: str) -> None:
        """Delete ``crawl``'s claim bitmaps ("": every crawl's), in every segment."""
        done = self._filter()
        args = [crawl, self.claim_options["slice_seconds"], self.claim_options["slices"]]
        for prefix in self._prefixes:
            done.storage.conn.eval(RELEASE, [prefix], args)

    def _record_late(self) -> None:
        """Write what this process fetched or let through while Redis was away."""
        done = self._filter()
        claimed = sorted(self._late_claimed - self._late_done)
        count = len(self._late_done) + len(claimed)
        if self._late_done:
            done.add_many(sorted(self._late_done))
            self._late_done.clear()  # written, even if the claims fail next
        for fingerprint in claimed:
            self._claim(fingerprint)
            self._late_claimed.discard(fingerprint)
        self._late_claimed.clear()
        if count:
            self._count("bloom_dupefilter/recorded_late", count)
            logger.warning(
                "Bloom filter %r answers again: recorded the %d requests fetched or "
                "scheduled while it was away",
                self.filter_name,
                count,
            )

    def _verdict(self, fingerprint: bytes) -> int:
        if self._late_done or self._late_claimed:
            self._record_late()
        return self._claim(fingerprint)

    def _mark_done(self, fingerprint: bytes) -> None:
        if self._late_done or self._late_claimed:
            self._record_late()
        self._filter().add(fingerprint)

    # -- Scrapy's calls -----------------------------------------------------------
    def open(self) -> None:
        try:
            self._filter()
        except FilterUnavailable as exc:
            self._unavailable(exc)

    def request_seen(self, request: Any) -> bool:
        fingerprint = self.fingerprinter.fingerprint(request)
        if fingerprint in self._recent or fingerprint in self._older:
            return True
        if fingerprint in self._late_claimed:
            return True
        try:
            verdict = self._redis(self._verdict, fingerprint)
        except FilterUnavailable:  # deduplicate in this process, write it later
            self._count("bloom_dupefilter/unavailable")
            self._keep(self._late_claimed, fingerprint)
            verdict = NEW
        if verdict != CLAIMED:
            self._remember(fingerprint)
        return verdict != NEW

    def request_done(self, request: Any) -> None:
        """A response arrived (``response_received``): record the request as done."""
        fingerprint = self.fingerprinter.fingerprint(request)
        self._remember(fingerprint)
        try:
            self._redis(self._mark_done, fingerprint)
        except FilterUnavailable:
            self._keep(self._late_done, fingerprint)

    def clear(self) -> None:
        """scrapy-redis's flush (its queue emptied): every crawl's claims go; what was
        fetched stays done (``manage.py bloom clear <BLOOM_FILTER>`` forgets it)."""
        self._recent.clear()
        self._older.clear()
        self._redis(self._release, "")

    def _remember(self, fingerprint: bytes) -> None:
        if len(self._recent) >= RECENT:
            self._older, self._recent = self._recent, set()
        self._recent.add(fingerprint)

    def _keep(self, backlog: set[bytes], fingerprint: bytes) -> None:
        """Into an outage's backlog, unless it holds BACKLOG already (then counted)."""
        if len(self._late_done) + len(self._late_claimed) < BACKLOG:
            backlog.add(fingerprint)
            return
        self._count("bloom_dupefilter/not_recorded")
        if self._warned != "full":
            self._warned = "full"
            logger.warning(
                "Bloom filter %r unavailable: %d requests kept to record later; the next "
                "are not recorded (other crawlers may fetch them too) and deduplicated "
                "by this crawler's recent memory alone",
                self.filter_name,
                BACKLOG,
            )

    def _redis(self, function: Callable[[Any], Any], argument: Any) -> Any:
        """``function(argument)``; FilterUnavailable while Redis is away (tried at most
        once a second; in between, no network wait)."""
        if time.monotonic() < self._offline_until:
            raise FilterUnavailable("waiting before trying Redis again")
        try:
            result = function(argument)
        except FilterUnavailable as exc:
            self._offline_until = time.monotonic() + RETRY_SECONDS
            self._unavailable(exc)
            raise
        self._warned = ""  # the next outage is logged again
        return result

    def _count(self, key: str, count: int = 1) -> None:
        if self.stats is not None:
            self.stats.inc_value(key, count)

    def _unavailable(self, exc: Exception) -> None:
        if not self._warned:
            logger.warning(
                "Bloom filter %r unavailable (%s): deduplicating in this process until it "
                "answers again (pages other crawlers fetched meanwhile may be fetched again)",
                self.filter_name,
                exc,
            )
            self._warned = "outage"

    def close(self, reason: str = "finished") -> None:
        """Write the outage's backlog, release this crawl's claims (a graceful stop: the
        next crawl fetches what it never did). Called once (Scrapy's scheduler, then
        ``spider_closed``)."""
        if self._closed:
            return
        self._closed = True
        super().close(reason)

        def finish() -> None:
            from django.db import connections

            try:
                self._record_before_closing()
                if self.releases:
                    self._redis(self._release, self.crawl_id)
            except FilterUnavailable as exc:
                logger.warning("Bloom filter %r: claims not released (%s)", self.filter_name, exc)
            finally:
                connections.close_all()

        self._worker.submit(finish).result()
        self._worker.shutdown()

    def _record_before_closing(self) -> None:
        """Write the outage's backlog, waiting up to CLOSE_WAIT_SECONDS for Redis."""
        deadline = time.monotonic() + CLOSE_WAIT_SECONDS
        while self._late_done or self._late_claimed:
            try:
                self._record_late()
            except FilterUnavailable as exc:
                if time.monotonic() < deadline:
                    time.sleep(0.2)
                    continue
                logger.warning(
                    "Bloom filter %r still unavailable (%s): %d fetched requests are not "
                    "recorded (a later crawl fetches them again)",
                    self.filter_name,
                    exc,
                    len(self._late_done),
                )
                return
