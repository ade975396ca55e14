"""A Scrapy dupefilter backed by a django-bloom filter (``pip install django-bloom[scrapy]``).

In the Scrapy project's settings::

    DUPEFILTER_CLASS = "django_bloom.contrib.scrapy.BloomDupeFilter"
    BLOOM_DJANGO_SETTINGS = "mysite.settings"  # django.setup() if not done yet
    BLOOM_FILTER = "crawl-requests"            # created on first use with:
    BLOOM_CAPACITY = 10_000_000
    BLOOM_ERROR_RATE = 1e-6
    BLOOM_DEBUG = False                        # log every filtered request

Each request costs one atomic ``add`` of its Scrapy fingerprint
(``crawler.request_fingerprinter``, so fingerprints match Scrapy's own): the
add answers "new" to exactly one caller, so crawler processes sharing the
filter never both fetch the same URL, and a later crawl skips what an earlier
one fetched. A Bloom filter can call a new fingerprint "seen" (a false
positive): about ``BLOOM_ERROR_RATE`` of new requests are skipped while the
filter holds no more than ``BLOOM_CAPACITY`` fingerprints.

Fail open: when the filter cannot answer (Redis down or refusing writes,
filter key lost) the request is crawled, counted in the stats as
``bloom_dupefilter/unavailable`` and logged once. Duplicates are possible
then; a new URL is never skipped because Redis was away.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from scrapy.dupefilters import RFPDupeFilter

from django_bloom.exceptions import FilterExists, FilterUnavailable

logger = logging.getLogger(__name__)

DEFAULT_FILTER = "scrapy-requests"
DEFAULT_CAPACITY = 10_000_000
DEFAULT_ERROR_RATE = 1e-6


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


class BloomDupeFilter(RFPDupeFilter):
    """``DUPEFILTER_CLASS``: request fingerprints in a django-bloom filter."""

    def __init__(
        self,
        filter_name: str = DEFAULT_FILTER,
        *,
        capacity: int = DEFAULT_CAPACITY,
        error_rate: float = DEFAULT_ERROR_RATE,
        debug: bool = False,
        fingerprinter: Any = None,
        stats: Any = None,
    ) -> None:
        super().__init__(None, debug, fingerprinter=fingerprinter)
        self.filter_name = filter_name
        self.capacity = capacity
        self.error_rate = error_rate
        self.stats = stats
        self._handle: Any = None
        self._warned = False
        # The ORM refuses to run inside a running event loop (Scrapy's default
        # asyncio reactor): filter look-ups that may read a row run on this thread.
        self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="bloom-dupefilter")

    @classmethod
    def from_crawler(cls, crawler: Any) -> BloomDupeFilter:
        settings = crawler.settings
        setup_django(settings.get("BLOOM_DJANGO_SETTINGS"))
        return cls(
            settings.get("BLOOM_FILTER") or DEFAULT_FILTER,
            capacity=settings.getint("BLOOM_CAPACITY", DEFAULT_CAPACITY),
            error_rate=settings.getfloat("BLOOM_ERROR_RATE", DEFAULT_ERROR_RATE),
            debug=settings.getbool("BLOOM_DEBUG") or settings.getbool("DUPEFILTER_DEBUG"),
            fingerprinter=crawler.request_fingerprinter,
            stats=crawler.stats,
        )

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
        try:
            return create_filter(
                self.filter_name,
                capacity=self.capacity,
                error_rate=self.error_rate,
                description="Scrapy request fingerprints (django_bloom.contrib.scrapy)",
            )
        except FilterExists:  # another crawler created it meanwhile
            return get_filter(self.filter_name)

    def _add(self, fingerprint: bytes) -> bool:
        if self._handle is None:
            self._handle = self._load()
        return self._handle.add(fingerprint)

    def open(self) -> None:
        try:
            self._handle = self._call(self._load)
        except FilterUnavailable as exc:
            self._unavailable(exc)

    def request_seen(self, request: Any) -> bool:
        fingerprint = self.fingerprinter.fingerprint(request)
        try:
            return not self._call(self._add, fingerprint)
        except FilterUnavailable as exc:
            self._unavailable(exc)
            return False  # fail open: crawl it (a possible duplicate, never a lost URL)

    def _unavailable(self, exc: Exception) -> None:
        if self.stats is not None:
            self.stats.inc_value("bloom_dupefilter/unavailable")
        if not self._warned:
            logger.warning(
                "Bloom filter %r unavailable (%s): crawling without duplicate filtering "
                "until it answers again (duplicates possible)",
                self.filter_name,
                exc,
            )
            self._warned = True

    def close(self, reason: str) -> None:
        super().close(reason)

        def close_connections() -> None:
            from django.db import connections

            connections.close_all()

        self._worker.submit(close_connections).result()
        self._worker.shutdown()
