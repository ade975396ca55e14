"""Scrapy dupefilter in process (issue 29): claims released by a graceful stop, a crawler
that keeps nothing per URL, an outage's bounded backlog, the filters on a Redis Cluster."""

import gc
import logging
import tracemalloc

import pytest

from django_bloom.models import BloomFilter
from tests.jobs.test_scrapy_dupefilter import Stats

pytest.importorskip("scrapy")


def dupefilter(name="requests", capacity=1000, **options):
    from scrapy.utils.request import RequestFingerprinter

    from django_bloom.contrib.scrapy import BloomDupeFilter

    made = BloomDupeFilter(
        name, capacity=capacity, fingerprinter=RequestFingerprinter(), stats=Stats(), **options
    )
    made.open()
    return made


def requests(urls):
    from scrapy import Request

    return [Request(url) for url in urls]


@pytest.mark.django_db
def test_a_graceful_close_releases_the_claims_a_killed_crawler_keeps_them():
    stopped, killed, later = dupefilter(), dupefilter(), dupefilter()
    fetched, unfetched, others = (requests([f"http://127.0.0.1/{w}"]) for w in "abc")
    assert not stopped.request_seen(fetched[0]) and not stopped.request_seen(unfetched[0])
    stopped.request_done(fetched[0])
    assert not killed.request_seen(others[0])  # killed: never closed
    stopped.close("closespider_pagecount")

    assert later.request_seen(fetched[0])  # done
    assert not later.request_seen(unfetched[0])  # released: this crawl fetches it
    assert later.request_seen(others[0])  # still claimed until BLOOM_CLAIM_SECONDS
    later.close("finished")


@pytest.mark.django_db
def test_clear_drops_every_crawls_claims_and_keeps_what_was_fetched():
    """scrapy-redis's flush (its queue emptied): the claims go, the done requests stay."""
    first, second = dupefilter(), dupefilter()
    done, queued = requests(["http://127.0.0.1/done", "http://127.0.0.1/queued"])
    assert not first.request_seen(done) and not second.request_seen(queued)
    first.request_done(done)
    first.clear()
    later = dupefilter()
    assert later.request_seen(done)
    assert not later.request_seen(queued)


@pytest.mark.django_db
@pytest.mark.slow
def test_the_crawler_keeps_nothing_per_url(monkeypatch):
    """Issue 29: 204 bytes per new URL were kept (a set of every fingerprint). Now a
    bounded memory of recent ones: 20,000 more new URLs add nothing."""
    from django_bloom.contrib import scrapy as contrib

    monkeypatch.setattr(contrib, "RECENT", 1000)
    # A busy machine can time Redis out mid-loop: the outage backlog is bounded too (kept
    # small here), and numpy (which writing that backlog loads) is imported before counting.
    monkeypatch.setattr(contrib, "BACKLOG", 1000)
    pytest.importorskip("numpy")
    crawler = dupefilter(capacity=50_000)
    for request in requests(f"http://127.0.0.1/warm/{i}" for i in range(3000)):
        crawler.request_seen(request)
    tracemalloc.start()
    try:
        gc.collect()
        before = tracemalloc.get_traced_memory()[0]
        for i in range(20_000):
            (request,) = requests([f"http://127.0.0.1/new/{i}"])
            assert not crawler.request_seen(request)
            assert crawler.request_seen(request)  # a repeat: remembered
        gc.collect()
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert grown < 1_000_000, grown  # the old set: 20,000 x 204 bytes = 4 MB
    crawler.close("finished")


@pytest.mark.django_db
def test_an_outage_keeps_a_bounded_backlog_and_says_so(monkeypatch, caplog):
    from django_bloom.contrib import scrapy as contrib

    monkeypatch.setattr(contrib, "BACKLOG", 5)
    monkeypatch.setattr(contrib, "RECENT", 4)
    import django_bloom

    django_bloom.create_filter("requests", capacity=1000)
    BloomFilter.objects.filter(name="requests").update(cache_alias="dead")
    django_bloom.get_filter("requests", refresh=True)
    crawler = dupefilter()
    batch = requests(f"http://127.0.0.1/{i}" for i in range(12))
    assert not any(crawler.request_seen(r) for r in batch)
    assert crawler.request_seen(batch[0])  # in the backlog: each page once
    assert len(crawler._late) == 5
    assert crawler.stats.values["bloom_dupefilter/not_recorded"] == 7
    assert sum("not recorded" in r.getMessage() for r in caplog.records) == 1
    with caplog.at_level(logging.ERROR):
        crawler.close("finished")


@pytest.mark.django_db
@pytest.mark.slow
def test_the_filters_run_sharded_on_a_cluster(on_cluster, bloom_prefix):
    import django_bloom

    first, second = dupefilter(segments=3), dupefilter(segments=3)
    batch = requests(f"http://127.0.0.1/{i}" for i in range(300))
    assert not any(first.request_seen(r) for r in batch)
    assert all(second.request_seen(r) for r in batch)  # claimed by the first
    for r in batch[:100]:
        first.request_done(r)
    first.close("shutdown")  # releases the 200 it did not fetch
    third = dupefilter(segments=3)
    assert [third.request_seen(r) for r in batch] == [True] * 100 + [False] * 200
    done = django_bloom.get_filter("requests")
    assert done.meta.layout == "sharded" and len(done.layout.segments) == 3
    nodes = {on_cluster.server_of(s.keys.bits).port for s in done.layout.segments}
    assert len(nodes) >= 2  # spread over the masters
    pattern = f"{bloom_prefix}:*claims*"
    claims = [k for s in on_cluster.servers for k in s.client().scan_iter(match=pattern)]
    assert claims  # the third crawl's claims, beside the segments they belong to
    second.close("finished")
    third.close("finished")


@pytest.mark.django_db
def test_no_thread_hop_once_the_filter_is_loaded():
    """Issue 29: every request hopped to a worker thread inside Scrapy's event loop. Now
    only reading the row does (at open): the requests call Redis from the loop's thread."""
    import asyncio

    crawler = dupefilter()

    def refuse(*args, **kwargs):
        raise AssertionError("a thread hop on the hot path")

    submit, crawler._worker.submit = crawler._worker.submit, refuse
    first, again = requests(["http://127.0.0.1/loop", "http://127.0.0.1/loop"])

    async def in_loop():
        return [crawler.request_seen(first), crawler.request_seen(again)]

    assert asyncio.run(in_loop()) == [False, True]
    crawler.request_done(first)
    crawler._worker.submit = submit
    crawler.close("finished")


@pytest.mark.django_db
def test_done_marks_wait_for_a_claim_a_full_buffer_a_tick_or_the_close(sent_commands, monkeypatch):
    """Issue 35: each response cost a round trip of its own. Now its done mark waits in
    process for the next claim, or goes with others when MARKS wait (one round trip), at
    the crawl's next tick (every MARKS_SECONDS) or at close: what a killed crawler can lose."""
    from scrapy.utils.request import RequestFingerprinter

    import django_bloom
    from django_bloom.contrib import scrapy as contrib
    from tests.conftest import handshake

    monkeypatch.setattr(contrib, "MARKS", 4)
    crawler = dupefilter()
    batch = requests(f"http://127.0.0.1/{i}" for i in range(7))
    assert not any(crawler.request_seen(r) for r in batch)

    def round_trips():
        return len([payload for payload in sent_commands if not handshake(payload)])

    sent_commands.clear()
    for r in batch[:3]:
        crawler.request_done(r)
    assert round_trips() == 0  # waiting for a claim
    crawler.request_done(batch[3])
    assert round_trips() == 1  # MARKS waited: written together
    crawler.request_done(batch[4])
    crawler.tick()  # the crawl's timer (a Twisted LoopingCall in a real crawl)
    assert round_trips() == 2
    crawler.tick()
    assert round_trips() == 2  # nothing waits: no round trip
    crawler.request_done(batch[5])
    crawler.close("finished")
    fingerprints = [RequestFingerprinter().fingerprint(r) for r in batch]
    assert django_bloom.get_filter("requests").contains_many(fingerprints) == [True] * 6 + [False]


@pytest.mark.django_db
def test_done_marks_a_claim_writes_while_a_rebuild_runs_are_journaled_and_counted():
    """A rebuild copies what its journal holds: the marks the claim's script wrote (as an
    add writes them) are journaled too, or a rebuilt filter would answer "not done"."""
    from scrapy.utils.request import RequestFingerprinter

    import django_bloom
    from django_bloom.engine import format as fmt
    from django_bloom.ops import counters

    crawler = dupefilter()
    done = django_bloom.get_filter("requests")
    page, other, following = requests(f"http://127.0.0.1/{p}" for p in ("a", "b", "c"))
    assert not crawler.request_seen(page) and not crawler.request_seen(other)
    assert done.layout.begin_build(done.storage, "token")  # the key is flagged REBUILDING
    crawler.request_done(page)
    crawler.request_done(other)
    assert not crawler.request_seen(following)  # carries both marks
    journal = fmt.unpack_journal(done.storage.read_journal(done.layout.control, 0))
    fingerprints = [RequestFingerprinter().fingerprint(r) for r in (page, other)]
    assert sorted(journal) == sorted(done.hashes(fingerprints))
    assert done.contains_many(fingerprints) == [True, True]
    done.layout.abort_build(done.storage, "token")
    counters.flush()
    assert done.stats().items_added == 2
    crawler.close("finished")


@pytest.mark.django_db
def test_a_repeat_costs_no_fingerprint_with_scrapys_own_fingerprinter_only():
    """Issue 35: a link seen again cost its fingerprint (canonicalising and hashing the URL,
    ~30 us) before the recent memory answered. Scrapy's own fingerprinter depends on the
    method, URL and body alone, so the memory knows those first; any other fingerprinter
    (here one that reads a header) is asked every time."""
    import hashlib

    from scrapy import Request
    from scrapy.utils.request import RequestFingerprinter

    from django_bloom.contrib.scrapy import BloomDupeFilter

    scrapys, asked = RequestFingerprinter(), []
    fingerprint = scrapys._fingerprint
    scrapys._fingerprint = lambda request: asked.append(request.url) or fingerprint(request)
    crawler = BloomDupeFilter("requests", capacity=1000, fingerprinter=scrapys)
    url = "http://127.0.0.1/page?b=2&a=1"
    assert not crawler.request_seen(Request(url))
    assert crawler.request_seen(Request(url))  # a new Request object: Scrapy's links are
    assert crawler.request_seen(Request("http://127.0.0.1/page?a=1&b=2"))  # its fingerprint
    assert asked == [url, "http://127.0.0.1/page?a=1&b=2"]
    crawler.close("finished")

    class BySession:
        def fingerprint(self, request):
            return hashlib.sha1(request.url.encode() + request.headers[b"Session"]).digest()

    other = BloomDupeFilter("others", capacity=1000, fingerprinter=BySession())
    first, second = (Request(url, headers={"Session": s}) for s in ("1", "2"))
    assert not other.request_seen(first) and not other.request_seen(second)
    assert other.request_seen(Request(url, headers={"Session": "1"}))
    other.close("finished")
