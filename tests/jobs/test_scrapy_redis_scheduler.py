"""The dupefilter under scrapy-redis's scheduler (issue 29): real crawls of a local site,
the request queue in Redis shared by two crawler processes."""

from collections import Counter

import pytest

from tests.jobs.test_scrapy_dupefilter import PAGES, Site, crawl, finish  # noqa: F401
from tests.settings import REDIS_URL

pytest.importorskip("scrapy_redis")


def scrapy_redis(bloom_prefix, persist):
    return {
        "SCHEDULER": "scrapy_redis.scheduler.Scheduler",
        "REDIS_URL": REDIS_URL,
        "SCHEDULER_QUEUE_KEY": f"{bloom_prefix}:%(spider)s:requests",
        "SCHEDULER_PERSIST": str(persist),
    }


@pytest.mark.slow
def test_two_crawlers_sharing_one_queue_fetch_each_page_once_and_a_rerun_nothing(
    crawl, bloom_prefix  # noqa: F811
):
    """It died at start: AttributeError: type object 'BloomDupeFilter' has no attribute
    'from_settings' (scrapy-redis builds it with from_spider, or from_settings)."""
    settings = scrapy_redis(bloom_prefix, persist=True)
    starts = ["/p/0", f"/p/{PAGES // 2}"]
    with Site(starts) as site:
        first, second = (crawl(site.url + path, **settings) for path in starts)
        outputs = [finish(first), finish(second)]
        assert site.hits == Counter({f"/p/{n}": 1 for n in range(PAGES)})  # every page, once
        assert all("'scheduler/enqueued/redis'" in out for out in outputs)

        again = finish(crawl(site.url + "/p/0", **settings))
        assert sum(site.hits.values()) == PAGES  # nothing fetched twice
        assert "'dupefilter/filtered': 1" in again


@pytest.mark.slow
def test_without_persist_a_stopped_crawl_leaves_the_rest_to_the_next_one(
    crawl, bloom_prefix  # noqa: F811
):
    """SCHEDULER_PERSIST off: at close scrapy-redis empties its queue and calls the
    dupefilter's clear(): the claims go, so the next crawl fetches what was left."""
    settings = {**scrapy_redis(bloom_prefix, persist=False), "CONCURRENT_REQUESTS": "2"}
    index = {"START_DONT_FILTER": "1"}
    with Site() as site:
        first = finish(crawl(site.url + "/", index, CLOSESPIDER_PAGECOUNT="4", **settings))
        assert "'finish_reason': 'closespider_pagecount'" in first
        assert 0 < len(site.pages()) < PAGES // 2

        finish(crawl(site.url + "/", index, **settings))
        assert site.pages() == {f"/p/{n}": 1 for n in range(PAGES)}  # the rest, once


@pytest.mark.slow
def test_with_persist_a_stopped_crawl_is_resumed_from_the_queue(crawl, bloom_prefix):  # noqa: F811
    settings = {**scrapy_redis(bloom_prefix, persist=True), "CONCURRENT_REQUESTS": "2"}
    with Site() as site:
        first = finish(crawl(site.url + "/p/0", CLOSESPIDER_PAGECOUNT="4", **settings))
        assert "'finish_reason': 'closespider_pagecount'" in first
        assert 0 < len(site.pages()) < PAGES

        second = finish(crawl(site.url + "/p/0", **settings))  # /p/0 is done: the queue's rest
        assert "Resuming crawl" in second
        assert site.pages() == {f"/p/{n}": 1 for n in range(PAGES)}
