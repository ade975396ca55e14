"""Re-crawl windows and forgotten URLs (issue 35): what makes a done page be fetched again."""

import time

import pytest

from tests.jobs.test_scrapy_claims import dupefilter, requests
from tests.jobs.test_scrapy_dupefilter import PAGES, Site, crawl, finish  # noqa: F401

WINDOW = 4  # BLOOM_RECRAWL_SECONDS: 4 slices of 1 s, a page remembered 4 to 5 s


@pytest.mark.slow
def test_a_page_is_fetched_again_once_its_window_passed_never_sooner(crawl):  # noqa: F811
    """BLOOM_RECRAWL_SECONDS: the done filter is a rotating window. A rerun within the
    window fetches nothing; once it passed (at most a quarter more, plus the second a done
    mark may wait in the crawler) a rerun fetches every page again, each once."""
    from django_bloom.contrib.scrapy import MARKS_SECONDS

    settings = {"BLOOM_RECRAWL_SECONDS": str(WINDOW)}
    index = {"START_DONT_FILTER": "1"}  # the index links to every page
    with Site() as site:
        finish(crawl(site.url + "/", index, **settings))
        assert site.pages() == {f"/p/{n}": 1 for n in range(PAGES)}
        finish(crawl(site.url + "/", index, **settings))  # at once: within the window
        last = max(times[-1] for path, times in site.times.items() if path != "/")
        time.sleep(max(0.0, last + WINDOW * 1.25 + MARKS_SECONDS + 0.5 - time.monotonic()))
        launched = time.monotonic()
        finish(crawl(site.url + "/", index, **settings))

    for path in site.pages():
        times = site.times[path]
        assert all(b - a >= WINDOW for a, b in zip(times, times[1:], strict=False)), (
            path,
            times,
        )  # never sooner
        if times[-1] < launched:  # fetched again by the second crawl (a slow machine)
            assert times[-1] + WINDOW * 1.25 + MARKS_SECONDS + 0.5 > launched, (path, times)
        else:
            assert len(times) >= 2
    assert sum(len(site.times[p]) >= 2 for p in site.pages()) == PAGES  # every page again


@pytest.mark.django_db
def test_forget_a_url_where_the_done_filter_can_remove_and_which_kinds_can():
    """Forgetting one URL on demand (docs/other-jobs.md): a counting done filter (made
    with layout "counting" before the first crawl) takes its fingerprint out, so the next
    crawl fetches it again; a plain Bloom filter and a re-crawl window cannot."""
    from scrapy.utils.request import RequestFingerprinter

    import django_bloom
    from django_bloom.exceptions import OperationNotSupported

    def forget(name, request):  # what the docs show
        fingerprint = RequestFingerprinter().fingerprint(request)
        return django_bloom.get_filter(name).remove(fingerprint)

    django_bloom.create_filter("counted", capacity=1000, layout="counting")
    page, other = requests(["http://127.0.0.1/page", "http://127.0.0.1/other"])
    crawler = dupefilter("counted")
    assert not crawler.request_seen(page) and not crawler.request_seen(other)
    crawler.request_done(page)
    crawler.request_done(other)
    crawler.close("finished")

    assert forget("counted", page)
    assert not forget("counted", requests(["http://127.0.0.1/never"])[0])  # nothing to remove
    later = dupefilter("counted")
    assert not later.request_seen(page)  # fetched again
    assert later.request_seen(other)  # still done
    later.close("finished")

    dupefilter("plain").close("finished")
    dupefilter("window", recrawl_seconds=60).close("finished")
    for name in ("plain", "window"):  # bits shared by items; a window forgets by time alone
        with pytest.raises(OperationNotSupported, match="counting"):
            forget(name, page)


@pytest.mark.django_db
def test_a_window_wanted_of_a_filter_made_without_one_refuses_to_start():
    """BLOOM_RECRAWL_SECONDS on a done filter made without that window would never fetch
    a page again (or not when asked): the crawl refuses to start instead."""
    dupefilter("requests").close("finished")
    with pytest.raises(ValueError, match="BLOOM_RECRAWL_SECONDS"):
        dupefilter("requests", recrawl_seconds=3600)
    dupefilter("window", recrawl_seconds=3600).close("finished")
    with pytest.raises(ValueError, match="BLOOM_RECRAWL_SECONDS"):
        dupefilter("window", recrawl_seconds=60)
    with pytest.raises(ValueError, match="BLOOM_SEGMENTS"):
        dupefilter("other", recrawl_seconds=60, segments=3)
