"""A Scrapy dupefilter backed by django-bloom filters (``pip install django-bloom[scrapy]``).

In the Scrapy project's settings::

    DUPEFILTER_CLASS = "django_bloom.contrib.scrapy.BloomDupeFilter"
    BLOOM_DJANGO_SETTINGS = "mysite.settings"  # django.setup() if not done yet
    BLOOM_FILTER = "crawl-requests"            # created on first use with:
    BLOOM_CAPACITY = 10_000_000
    BLOOM_ERROR_RATE = 1e-6
    BLOOM_CLAIM_SECONDS = 3600                 # how long a scheduled request is claimed
    BLOOM_CLAIM_CAPACITY = 1_000_000           # new requests per claim window
    BLOOM_DEBUG = False                        # log every filtered request

Two filters, fingerprints from ``crawler.request_fingerprinter`` (Scrapy's own):

- ``BLOOM_FILTER`` holds the requests that are **done**: written when the
  response arrives (any status, after Scrapy's retries). A later crawl skips them.
- ``<BLOOM_FILTER>-claims`` (a rotating filter) holds **claims**: a request is
  scheduled only by the crawler whose atomic ``add`` answered "new", so crawlers
  sharing the filters never both fetch a page. A claim expires after
  ``BLOOM_CLAIM_SECONDS`` (up to 25% more): a page scheduled by a crawl that
  stopped or died before fetching it is fetched by a crawl after that.

A new request costs two round trips (done? then claim), a done one one, a
response one; a request this crawler already answered costs none (the crawler
keeps those fingerprints in memory, as Scrapy's own dupefilter does). A filter's
false positive skips a new request (about ``BLOOM_ERROR_RATE`` of them).

Redis away: requests are deduplicated in this process (each page fetched at most
once by this crawler), counted as ``bloom_dupefilter/unavailable``, logged once per
outage; Redis is tried again each second. When it answers, what was fetched and
scheduled meanwhile is written to the filters, one batch each
(``bloom_dupefilter/recorded_late``), so other crawlers skip it.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from scrapy.dupefilters import RFPDupeFilter

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
    """Rotating options whose window is at least ``claim_seconds`` (at most 4 slices)."""
    if isinstance(claim_seconds, bool) or not isinstance(claim_seconds, int) or claim_seconds < 1:
        raise ValueError(f"BLOOM_CLAIM_SECONDS must be an integer >= 1, got {claim_seconds!r}")
    slices = min(CLAIM_SLICES, claim_seconds)
    return {"slices": slices, "slice_seconds": -(-claim_seconds // slices)}


class BloomDupeFilter(RFPDupeFilter):
    """``DUPEFILTER_CLASS``: done and claimed request fingerprints in django-bloom filters."""

    def __init__(
        self,
        filter_name: str = DEFAULT_FILTER,
        *,
        capacity: int = DEFAULT_CAPACITY,
        error_rate: float = DEFAULT_ERROR_RATE,
        claim_seconds: int = DEFAULT_CLAIM_SECONDS,
        claim_capacity: int = DEFAULT_CLAIM_CAPACITY,
        debug: bool = False,
        fingerprinter: Any = None,
        stats: Any = None,
    ) -> None:
        super().__init__(None, debug, fingerprinter=fingerprinter)
        self.filter_name = filter_name
        self.claims_name = f"{filter_name}-claims"
        self.capacity = capacity
        self.error_rate = error_rate
        self.claim_options = claim_options(claim_seconds)
        self.claim_capacity = claim_capacity
        self.stats = stats
        self._done: Any = None
        self._claims: Any = None
        # Fingerprints answered for good in this process: let through by it, or done.
        self._answered: set[bytes] = set()
        # While Redis is away: fetched (done) and let through (claimed) fingerprints.
        self._late_done: set[bytes] = set()
        self._late_claimed: set[bytes] = set()
        self._offline_until = 0.0  # monotonic time before which Redis is not tried
        self._warned = False
        # The ORM refuses to run inside a running event loop (Scrapy's default
        # asyncio reactor): filter look-ups that may read a row run on this thread.
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
            claim_seconds=settings.getint("BLOOM_CLAIM_SECONDS", DEFAULT_CLAIM_SECONDS),
            claim_capacity=settings.getint("BLOOM_CLAIM_CAPACITY", DEFAULT_CLAIM_CAPACITY),
            debug=settings.getbool("BLOOM_DEBUG") or settings.getbool("DUPEFILTER_DEBUG"),
            fingerprinter=crawler.request_fingerprinter,
            stats=crawler.stats,
        )
        crawler.signals.connect(dupefilter.request_done, signal=signals.response_received)
        return dupefilter

    # -- the filters (run on the worker thread inside an event loop) ------------
    def _call(self, function: Callable[..., Any], *args: Any) -> Any:
        if _in_event_loop():
            return self._worker.submit(function, *args).result()
        return function(*args)

    def _load(self, name: str, **spec: Any) -> Any:
        from django_bloom import create_filter, get_filter
        from django_bloom.exceptions import FilterNotFound

        try:
            return get_filter(name)
        except FilterNotFound:
            pass
        try:
            return create_filter(
                name,
                description="Scrapy request fingerprints (django_bloom.contrib.scrapy)",
                **spec,
            )
        except FilterExists:  # another crawler created it meanwhile
            return get_filter(name)

    def _filters(self) -> tuple[Any, Any]:
        if self._done is None:
            self._done = self._load(
                self.filter_name, capacity=self.capacity, error_rate=self.error_rate
            )
        if self._claims is None:
            slices = self.claim_options["slices"]
            self._claims = self._load(
                self.claims_name,
                capacity=-(-self.claim_capacity // slices),  # per slice
                error_rate=self.error_rate / (slices + 1),  # a query reads up to W + 1 slices
                layout="rotating",
                options=self.claim_options,
            )
        return self._done, self._claims

    def _record_late(self) -> None:
        """Write what this process fetched or let through while Redis was away."""
        done, claims = self._filters()
        claimed = sorted(self._late_claimed - self._late_done)
        count = len(self._late_done) + len(claimed)
        if self._late_done:
            done.add_many(sorted(self._late_done))
            self._late_done.clear()  # written, even if the claims fail next
        if claimed:
            claims.add_many(claimed)
        self._late_claimed.clear()
        if count:
            self._count("bloom_dupefilter/recorded_late", count)
            logger.warning(
                "Bloom filter %r answers again: recorded the %d requests fetched or "
                "scheduled while it was away",
                self.filter_name,
                count,
            )

    def _verdict(self, fingerprint: bytes) -> str:
        """One of done, claimed (by another crawler, or before a claim expired) and new."""
        self._record_late()
        done, claims = self._filters()
        if done.contains(fingerprint):
            return "done"
        return "new" if claims.add(fingerprint) else "claimed"

    def _mark_done(self, fingerprint: bytes) -> None:
        self._record_late()
        self._filters()[0].add(fingerprint)

    # -- Scrapy's calls -----------------------------------------------------------
    def open(self) -> None:
        try:
            self._call(self._filters)
        except FilterUnavailable as exc:
            self._unavailable(exc)

    def request_seen(self, request: Any) -> bool:
        fingerprint = self.fingerprinter.fingerprint(request)
        if fingerprint in self._answered:
            return True
        try:
            verdict = self._redis(self._verdict, fingerprint)
        except FilterUnavailable:  # deduplicate in this process, write it later
            self._count("bloom_dupefilter/unavailable")
            self._late_claimed.add(fingerprint)
            verdict = "new"
        if verdict != "claimed":
            self._answered.add(fingerprint)
        return verdict != "new"

    def request_done(self, request: Any) -> None:
        """A response arrived (``response_received``): record the request as done."""
        fingerprint = self.fingerprinter.fingerprint(request)
        self._answered.add(fingerprint)
        try:
            self._redis(self._mark_done, fingerprint)
        except FilterUnavailable:
            self._late_done.add(fingerprint)

    def _redis(self, function: Callable[[bytes], Any], fingerprint: bytes) -> Any:
        """``function(fingerprint)`` on the worker; FilterUnavailable while Redis is away
        (tried at most once a second; in between, no network wait)."""
        if time.monotonic() < self._offline_until:
            raise FilterUnavailable("waiting before trying Redis again")
        try:
            result = self._call(function, fingerprint)
        except FilterUnavailable as exc:
            self._offline_until = time.monotonic() + RETRY_SECONDS
            self._unavailable(exc)
            raise
        self._warned = False  # the next outage is logged again
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
            self._warned = True

    def close(self, reason: str) -> None:
        super().close(reason)

        def finish() -> None:
            from django.db import connections

            try:
                self._record_before_closing()
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
