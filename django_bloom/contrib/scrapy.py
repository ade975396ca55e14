"""A Scrapy dupefilter backed by django-bloom filters (``pip install django-bloom[scrapy]``).

In the Scrapy project's settings (Scrapy's scheduler, or scrapy-redis's)::

    DUPEFILTER_CLASS = "django_bloom.contrib.scrapy.BloomDupeFilter"
    BLOOM_DJANGO_SETTINGS = "mysite.settings"  # django.setup() if not done yet
    BLOOM_FILTER = "crawl-requests"            # created on first use with:
    BLOOM_CAPACITY = 10_000_000
    BLOOM_ERROR_RATE = 1e-6
    BLOOM_SEGMENTS = 0                         # N: sharded over N segments (a cluster)
    BLOOM_RECRAWL_SECONDS = 0                  # N: a page is fetched again N s after
    BLOOM_CLAIM_SECONDS = 3600                 # how long a scheduled request is claimed
    BLOOM_CLAIM_CAPACITY = 1_000_000           # new requests per claim window and crawl
    BLOOM_DEBUG = False                        # log every filtered request

Scrapy's fingerprints: ``BLOOM_FILTER`` holds the requests that are **done**, claims beside
it keep two crawlers from fetching one page (``crawl_filters.py``). A new request is one
round trip; one answered lately none (``RECENT``: nothing is kept per URL); a response none:
its done mark waits in process and rides along with the next claim, or goes with others
once ``MARKS`` wait, at the crawl's tick (each ``MARKS_SECONDS``) or at close, which then
releases this crawl's claims (``clear``, scrapy-redis's flush: every crawl's). A killed
crawler loses its last second's marks at most: those pages are fetched again once its
claims expire. Only the row is read on a worker thread (the ORM's rule).

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
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from django.db import connections
from scrapy.dupefilters import RFPDupeFilter
from scrapy.utils.request import RequestFingerprinter

from django_bloom.contrib.crawl_filters import (
    CLAIMED,
    NEW,
    CrawlFilters,
    claim_options,
    done_spec,
)
from django_bloom.exceptions import FilterExists, FilterKeyMissing, FilterUnavailable

logger = logging.getLogger(__name__)

DEFAULT_FILTER = "scrapy-requests"
DEFAULT_CAPACITY = 10_000_000
DEFAULT_ERROR_RATE = 1e-6
DEFAULT_CLAIM_SECONDS = 3600
DEFAULT_CLAIM_CAPACITY = 1_000_000
RETRY_SECONDS = 1.0  # while Redis is away, how often a request tries it again
CLOSE_WAIT_SECONDS = 3.0  # at close, how long Redis may take to come back for the backlog
RECENT = 32_768  # keys and fingerprints per generation of the recent memory (two of them)
BACKLOG = 65_536  # fingerprints an outage keeps to write later (about 6 MB)
MARKS = 64  # done marks kept for the next claim before they are written together
MARKS_SECONDS = 1.0  # the crawl's tick: done marks still waiting are written


def setup_django(settings_module: str | None) -> None:
    """``django.setup()`` with ``settings_module`` unless Django is set up already."""
    from django.apps import apps

    if apps.ready:
        return
    if settings_module:
        os.environ.setdefault("DJANGO_SETTINGS_MODULE", settings_module)
    import django

    django.setup()


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
        recrawl_seconds: int = 0,
        claim_seconds: int = DEFAULT_CLAIM_SECONDS,
        claim_capacity: int = DEFAULT_CLAIM_CAPACITY,
        debug: bool = False,
        fingerprinter: Any = None,
        stats: Any = None,
    ) -> None:
        super().__init__(None, debug, fingerprinter=fingerprinter)
        self.filter_name, self.error_rate = filter_name, error_rate
        self.spec = done_spec(capacity, error_rate, segments, recrawl_seconds)
        self.claim_options = claim_options(claim_seconds)
        self.claim_capacity = claim_capacity
        self.stats = stats
        self.crawl_id = uuid.uuid4().hex[:12]  # this crawl's claims
        self.releases = True  # at close; not under scrapy-redis (its queue keeps them)
        self._crawl: CrawlFilters | None = None
        self._recent: set[Any] = set()  # answered for good lately (let through, or done):
        self._older: set[Any] = set()  # keys and fingerprints; the generation before
        self._by_url = type(self.fingerprinter) is RequestFingerprinter  # ``_key``
        self._late: dict[bytes, bool] = {}  # not written yet: fingerprint -> fetched?
        self._offline_until = 0.0  # monotonic time before which Redis is not tried
        self._warned = ""  # "outage" (logged), "full" (the backlog's end logged too)
        self._closed = False
        self._ticker: Any = None  # the crawl's timer (a Twisted LoopingCall): ``tick``
        # The filter's row is read on this thread: the ORM refuses Scrapy's event loop.
        self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="bloom-dupefilter")

    @classmethod
    def from_crawler(cls, crawler: Any) -> BloomDupeFilter:
        from scrapy import signals
        from twisted.internet import task

        settings = crawler.settings
        setup_django(settings.get("BLOOM_DJANGO_SETTINGS"))
        dupefilter = cls(
            settings.get("BLOOM_FILTER") or DEFAULT_FILTER,
            capacity=settings.getint("BLOOM_CAPACITY", DEFAULT_CAPACITY),
            error_rate=settings.getfloat("BLOOM_ERROR_RATE", DEFAULT_ERROR_RATE),
            segments=settings.getint("BLOOM_SEGMENTS", 0),
            recrawl_seconds=settings.getint("BLOOM_RECRAWL_SECONDS", 0),
            claim_seconds=settings.getint("BLOOM_CLAIM_SECONDS", DEFAULT_CLAIM_SECONDS),
            claim_capacity=settings.getint("BLOOM_CLAIM_CAPACITY", DEFAULT_CLAIM_CAPACITY),
            debug=settings.getbool("BLOOM_DEBUG") or settings.getbool("DUPEFILTER_DEBUG"),
            fingerprinter=crawler.request_fingerprinter,
            stats=crawler.stats,
        )
        crawler.signals.connect(dupefilter.request_done, signal=signals.response_received)
        crawler.signals.connect(dupefilter.close, signal=signals.spider_closed)
        dupefilter._ticker = task.LoopingCall(dupefilter.tick)
        dupefilter._ticker.start(MARKS_SECONDS, now=False)
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
            done = get_filter(self.filter_name)
        made = (done.meta.layout, done.meta.options)
        if self.spec.get("layout") == "rotating" and made != ("rotating", self.spec["options"]):
            raise ValueError(  # it would never fetch a page again, or not when asked
                f"BLOOM_RECRAWL_SECONDS wants {self.filter_name!r} a rotating window with "
                f"{self.spec['options']}; it was made {made}: delete it, or another BLOOM_FILTER"
            )
        return done

    def _filters(self) -> CrawlFilters:
        """The done filter and what a claim needs (once per handle)."""
        if self._crawl is None:
            done = self._call(self._load)
            options, capacity = self.claim_options, self.claim_capacity
            self._crawl = CrawlFilters(done, self.crawl_id, options, capacity, self.error_rate)
        return self._crawl

    def _claim(self, fingerprint: bytes) -> int:
        """DONE, CLAIMED or NEW (claimed now, by this crawl): one round trip, which also
        writes the done marks waiting (``CrawlFilters.claim``)."""
        marks = [done for done, fetched in self._late.items() if fetched]
        verdict, written = self._filters().claim(fingerprint, marks)
        for done in written:
            del self._late[done]
        return verdict

    def _write_late(self) -> None:
        """Write what waits: done marks (MARKS of them, at a tick, at close) and what this
        process fetched or let through while Redis was away (an outage's backlog)."""
        outage, count = self._warned, len(self._late)
        fetched = sorted(fingerprint for fingerprint, done in self._late.items() if done)
        self._filters().done.add_many(fetched)
        self._late = {fp: done for fp, done in self._late.items() if not done}  # written
        for fingerprint in sorted(self._late):
            self._claim(fingerprint)
            del self._late[fingerprint]
        if not (outage and count):
            return
        self._count("bloom_dupefilter/recorded_late", count)
        logger.warning(
            "Bloom filter %r answers again: recorded the %d requests fetched or "
            "scheduled while it was away",
            self.filter_name,
            count,
        )

    def _release(self, crawl: str) -> None:
        """What waits first (the claims held it back from other crawls), then the claims."""
        self._write_late()
        self._filters().release(crawl)

    # -- Scrapy's calls -----------------------------------------------------------
    def open(self) -> None:
        with contextlib.suppress(FilterUnavailable):  # said so; the first request tries again
            self._redis(lambda _: self._filters(), None)

    def request_seen(self, request: Any) -> bool:
        key = self._key(request)
        if key in self._recent or key in self._older:
            return True
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
            self._remember(key, fingerprint)
        return verdict != NEW

    def request_done(self, request: Any) -> None:
        """A response arrived (``response_received``): the request is done. Its mark waits
        for the next claim; MARKS of them are written at once."""
        fingerprint = self.fingerprinter.fingerprint(request)
        self._remember(self._key(request), fingerprint)
        self._keep(fingerprint, True)
        if len(self._late) >= MARKS:
            self.tick()

    def _key(self, request: Any) -> Any:
        """A request as the recent memory knows it first. Scrapy's own fingerprinter is a
        function of the method, URL, body and ``verbatim_url``: those, hashed, so a repeat
        of the same URL costs no fingerprint (canonicalising and hashing it, ~30 us); with
        another fingerprinter, the fingerprint."""
        if self._by_url:
            meta = request.meta.get("verbatim_url")
            return hash((request.method, request.url, request.body, meta))
        return self.fingerprinter.fingerprint(request)

    def tick(self) -> None:
        """The crawl's timer (each MARKS_SECONDS): write the done marks still waiting."""
        if self._late:
            with contextlib.suppress(FilterUnavailable):
                self._redis(lambda _: self._write_late(), None)

    def clear(self) -> None:
        """scrapy-redis's flush (its queue emptied): every crawl's claims go; what was
        fetched stays done (``manage.py bloom clear <BLOOM_FILTER>`` forgets it)."""
        self._redis(self._release, "")

    def _remember(self, key: Any, fingerprint: bytes) -> None:
        if len(self._recent) >= RECENT:
            self._older, self._recent = self._recent, set()
        self._recent.update((key, fingerprint))

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
            if self._late and self._warned:
                self._write_late()
            result = function(argument)
        except FilterUnavailable as exc:
            self._offline_until = time.monotonic() + RETRY_SECONDS
            if isinstance(exc, FilterKeyMissing):  # deleted or resized: read the row again
                self._crawl = None
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
        """Write what waits (done marks, an outage's backlog: up to CLOSE_WAIT_SECONDS for
        Redis), then release this crawl's claims: the next crawl fetches what this one
        never did. Runs once (Scrapy's scheduler calls it, then ``spider_closed``:
        scrapy-redis's never)."""
        if self._closed:
            return
        self._closed = True
        if self._ticker is not None and self._ticker.running:
            self._ticker.stop()
        super().close(reason)
        self._worker.submit(self._finish).result()
        self._worker.shutdown()

    def _finish(self) -> None:
        deadline = time.monotonic() + CLOSE_WAIT_SECONDS
        try:
            while self._late:
                try:
                    self._write_late()
                except FilterUnavailable:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.2)
            if self.releases and self._crawl is not None:
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
