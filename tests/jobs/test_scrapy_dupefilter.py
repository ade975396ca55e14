"""Scrapy dupefilter: real crawls of a local site with link cycles, two crawlers at once."""

import os
import subprocess
import sys
import textwrap
import threading
import time
import warnings
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from tests.conftest import ROOT, handshake

try:
    import scrapy  # noqa: F401
except ImportError:  # pragma: no cover - only where the extra cannot be installed
    msg = "SCRAPY TEST SKIPPED: scrapy is not importable (pip install django-bloom[scrapy])"
    warnings.warn(msg, stacklevel=1)
    pytest.skip(msg, allow_module_level=True)

PAGES = 40
FILTER = "crawl-requests"

SPIDER = textwrap.dedent(
    """
    import os
    import scrapy

    class Site(scrapy.Spider):
        name = "site"

        # The start request goes through the dupefilter too, unless START_DONT_FILTER
        # (what start_urls does).
        async def start(self):  # Scrapy >= 2.13
            yield self.first()

        def start_requests(self):  # older Scrapy
            yield self.first()

        def first(self):
            dont_filter = bool(os.environ.get("START_DONT_FILTER"))
            return scrapy.Request(os.environ["START_URL"], dont_filter=dont_filter)

        def parse(self, response):
            for href in response.css("a::attr(href)").getall():
                yield response.follow(href)
    """
)


def links(page):
    """Every page links back to 0, to its neighbours and across: cycles everywhere."""
    return sorted({0, (page + 1) % PAGES, (page - 1) % PAGES, (page * 7 + 3) % PAGES})


class Site:
    """Pages /p/0 .. /p/N-1 on 127.0.0.1 and an index / linking to all; counts the hits
    per path (``hits``) and per phase (``phase_hits``, the test sets ``phase``); ``times``:
    per path, when it was asked for (``time.monotonic()``).

    The two start pages answer only once both were asked for (or after 10 s), so
    two crawlers started together really overlap. ``hold(n)``: the n-th hit and the
    ones after it wait until ``release()`` (``held`` is set once one waits)."""

    def __init__(self, starts=()):
        self.hits = Counter()
        self.phase, self.phase_hits, self.times = "", {}, {}
        self.lock = threading.Lock()
        self.started = threading.Barrier(len(starts)) if len(starts) > 1 else None
        self.starts = set(starts)
        self.hold_at, self.gate, self.held = None, threading.Event(), threading.Event()
        self.gate.set()
        site = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                with site.lock:
                    site.hits[self.path] += 1
                    site.phase_hits.setdefault(site.phase, []).append(self.path)
                    site.times.setdefault(self.path, []).append(time.monotonic())
                    if site.hold_at is not None and sum(site.hits.values()) >= site.hold_at:
                        site.hold_at = None
                        site.gate.clear()
                        site.held.set()
                site.gate.wait(timeout=30)
                if site.started is not None and self.path in site.starts:
                    try:
                        site.started.wait(timeout=10)
                    except threading.BrokenBarrierError:
                        pass
                time.sleep(0.01)  # a little latency: requests of both crawlers interleave
                if self.path == "/":
                    body = "".join(f'<a href="/p/{n}">{n}</a> ' for n in range(PAGES)).encode()
                elif self.path.startswith("/p/"):
                    page = int(self.path[3:])
                    body = "".join(f'<a href="/p/{n}">{n}</a> ' for n in links(page)).encode()
                else:
                    self.send_error(404)
                    return
                self.send_response(200)
                self.send_header("Content-Type", "text/html")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def hold(self, hits):
        with self.lock:
            self.held.clear()
            self.hold_at = hits

    def release(self, phase):
        with self.lock:
            self.phase = phase
        self.gate.set()

    def pages(self):
        return {path: n for path, n in self.hits.items() if path.startswith("/p/")}

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.gate.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def crawl(tmp_path, bloom_prefix):
    """crawl(start_url) -> a started crawler process (subprocess.Popen)."""
    spider = tmp_path / "site_spider.py"
    spider.write_text(SPIDER)
    env = {
        **{k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"},
        "PYTHONPATH": str(ROOT),
        "BLOOM_SCRAPY_DB": str(tmp_path / "crawl.sqlite3"),
        "BLOOM_KEY_PREFIX": bloom_prefix,
    }
    migrate = [sys.executable, "-m", "django", "migrate", "django_bloom", "-v", "0"]
    migrate += ["--settings", "tests.scrapy_settings"]
    subprocess.run(migrate, env=env, cwd=ROOT, check=True, timeout=60)
    started = []

    def start(url, environ=None, **extra):
        settings = {
            "DUPEFILTER_CLASS": "django_bloom.contrib.scrapy.BloomDupeFilter",
            "BLOOM_DJANGO_SETTINGS": "tests.scrapy_settings",
            "BLOOM_FILTER": FILTER,
            "BLOOM_CAPACITY": "10000",
            "BLOOM_ERROR_RATE": "0.000001",
            "CONCURRENT_REQUESTS": "8",
            "TELNETCONSOLE_ENABLED": "False",
            "LOG_LEVEL": "INFO",
            **extra,
        }
        command = [sys.executable, "-m", "scrapy", "runspider", str(spider)]
        for name, value in settings.items():
            command += ["-s", f"{name}={value}"]
        process = subprocess.Popen(
            command,
            env={**env, "START_URL": url, **(environ or {})},
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        started.append(process)
        return process

    start.env = env  # for a Django process that reads what the crawlers wrote
    yield start
    for process in started:
        if process.poll() is None:
            process.kill()
            process.wait()


def finish(process):
    output, _ = process.communicate(timeout=60)
    assert process.returncode == 0, output
    assert "Traceback" not in output, output
    return output


@pytest.mark.slow
def test_two_crawlers_fetch_each_page_once_and_a_second_crawl_fetches_nothing(crawl):
    starts = ["/p/0", f"/p/{PAGES // 2}"]
    with Site(starts) as site:
        first, second = (crawl(site.url + path) for path in starts)
        outputs = [finish(first), finish(second)]
        assert site.hits == Counter({f"/p/{n}": 1 for n in range(PAGES)})  # every page, once
        assert all("'downloader/response_count'" in out for out in outputs)  # both crawled

        again = finish(crawl(site.url + "/p/0", BLOOM_DEBUG="True", LOG_LEVEL="DEBUG"))
        assert sum(site.hits.values()) == PAGES  # nothing fetched twice
        assert "'dupefilter/filtered': 1" in again
        assert f"Filtered duplicate request: <GET {site.url}/p/0>" in again  # BLOOM_DEBUG


@pytest.mark.slow
def test_a_crawl_stopped_early_leaves_the_pages_it_did_not_fetch_to_the_next_one(crawl):
    """Issue 29: a graceful stop (CLOSESPIDER_PAGECOUNT) releases what the crawl claimed
    and never fetched: an immediate second crawl fetches the rest (the claims last an
    hour, BLOOM_CLAIM_SECONDS' default: only a killed crawler's wait for it)."""
    settings = {"CONCURRENT_REQUESTS": "2"}
    index = {"START_DONT_FILTER": "1"}  # as start_urls: the index is fetched every time
    with Site() as site:
        first = finish(crawl(site.url + "/", index, CLOSESPIDER_PAGECOUNT="4", **settings))
        assert "'finish_reason': 'closespider_pagecount'" in first
        fetched_first = set(site.pages())
        assert 0 < len(fetched_first) < PAGES // 2  # stopped early; the rest was scheduled

        finish(crawl(site.url + "/", index, **settings))  # at once
        assert site.pages() == {f"/p/{n}": 1 for n in range(PAGES)}  # the rest, once
        assert site.hits["/"] == 2


@pytest.mark.slow
def test_a_killed_crawls_claims_wait_for_bloom_claim_seconds(crawl):
    """A crawler killed (SIGKILL) releases nothing: its claims expire after
    BLOOM_CLAIM_SECONDS (here 8: 4 slices of 2 s, within 10 s), then a crawl fetches
    the rest. Issue 35: the pages it fetched are not fetched again: a response's done
    mark waits in the crawler at most MARKS_SECONDS (here no claim carries it: the crawl
    waits on held pages), so a kill loses at most the marks of its last second."""
    from django_bloom.contrib.scrapy import MARKS_SECONDS

    settings = {"BLOOM_CLAIM_SECONDS": "8", "CONCURRENT_REQUESTS": "2"}
    index = {"START_DONT_FILTER": "1"}
    with Site() as site:
        site.hold(6)
        first = crawl(site.url + "/", index, **settings)
        assert site.held.wait(timeout=60), "the crawl did not start"
        served = [path for path in site.phase_hits[""][:5] if path.startswith("/p/")]
        time.sleep(MARKS_SECONDS + 1)  # the last response's mark: written by the next tick
        first.kill()
        first.wait(timeout=30)
        site.release("after")
        fetched_first = set(site.pages())
        assert len(fetched_first) < PAGES  # the index's 40 links were claimed, not fetched
        finish(crawl(site.url + "/", index, **settings))  # at once: the claims still hold
        assert set(site.pages()) == fetched_first

        time.sleep(10.5)  # the killed crawl's claims expire (at most 10 s after the last)
        finish(crawl(site.url + "/", index, **settings))
        assert set(site.pages()) == {f"/p/{n}" for n in range(PAGES)}  # the rest
        assert served and all(site.hits[path] == 1 for path in served)  # none fetched again


def stop(server):
    """Stop a private redis-server cleanly (SIGTERM by PID: its append-only file is kept)."""
    server.process.terminate()
    server.process.wait(timeout=30)


def in_shared_filter(env, urls):
    """Whether each URL's fingerprint is in the crawlers' filter, asked by a new process."""
    from scrapy import Request
    from scrapy.utils.request import RequestFingerprinter

    fingerprinter = RequestFingerprinter()
    hexes = [fingerprinter.fingerprint(Request(url)).hex() for url in urls]
    script = (
        "import sys, django; django.setup(); import django_bloom; "
        f"f = django_bloom.get_filter({FILTER!r}); "
        "print(f.contains_many([bytes.fromhex(h) for h in sys.argv[1:]]))"
    )
    run = [sys.executable, "-c", script, *hexes]
    env = {**env, "DJANGO_SETTINGS_MODULE": "tests.scrapy_settings"}
    done = subprocess.run(run, env=env, cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


@pytest.mark.slow
def test_redis_stopped_mid_crawl_each_page_once_and_the_outage_is_written_after(
    crawl, redis_server
):
    """Issue 20 item 4: while Redis is away the crawler deduplicates in process; when it
    answers again, the pages fetched meanwhile are written to the shared filter."""
    server = redis_server("--appendonly", "yes")  # a restart keeps the filters
    environ = {"BLOOM_SCRAPY_REDIS": server.url}
    with Site() as site:
        site.hold(8)
        process = crawl(site.url + "/p/0", environ, CONCURRENT_REQUESTS="4")
        assert site.held.wait(timeout=60), "the crawl did not start"
        stop(server)
        site.hold(20)
        site.release("outage")
        assert site.held.wait(timeout=60), "the crawl ended during the outage"
        server.start()  # same port, same directory
        site.release("after")
        output = finish(process)

    assert site.hits == Counter({f"/p/{n}": 1 for n in range(PAGES)})  # every page, once
    assert "deduplicating in this process" in output
    assert "'bloom_dupefilter/recorded_late'" in output
    outage = site.phase_hits["outage"]
    assert len(outage) >= 5
    crawlers_env = {**crawl.env, **environ}
    assert in_shared_filter(crawlers_env, [site.url + path for path in outage]) == str(
        [True] * len(outage)
    )


class Stats:
    """The one method of Scrapy's stats collector the dupefilter calls."""

    def __init__(self):
        self.values = Counter()

    def inc_value(self, key, count=1):
        self.values[key] += count


def in_process_filter(name="requests"):
    from scrapy.utils.request import RequestFingerprinter

    from django_bloom.contrib.scrapy import BloomDupeFilter

    dupefilter = BloomDupeFilter(
        name, capacity=1000, fingerprinter=RequestFingerprinter(), stats=Stats()
    )
    dupefilter.open()
    return dupefilter


@pytest.mark.django_db
def test_round_trips_claims_and_done_and_the_fingerprint_is_scrapys(sent_commands):
    """Issue 29: a new request is one round trip (done? and the claim, in one script),
    a repeat this crawler answered none. Issue 35: a response none (it cost one): its
    done mark rides along with the next claim."""
    from scrapy import Request
    from scrapy.utils.request import RequestFingerprinter

    import django_bloom

    def round_trips():  # a connection's handshake (a reconnect) is not the operation's
        return len([payload for payload in sent_commands if not handshake(payload)])

    crawler, other = in_process_filter(), in_process_filter()
    first = Request("http://127.0.0.1/a?x=1&y=2")
    sent_commands.clear()
    assert not crawler.request_seen(first)
    assert round_trips() == 1  # not done, not claimed: claimed now
    assert crawler.request_seen(Request("http://127.0.0.1/a?y=2&x=1"))  # same canonical URL
    assert round_trips() == 1  # answered in this process already
    assert other.request_seen(Request(first.url))  # claimed by the first crawler
    assert round_trips() == 2
    fingerprint = RequestFingerprinter().fingerprint(first)
    crawler.request_done(first)  # its response arrived
    assert round_trips() == 2  # its done mark waits for the next claim
    assert not crawler.request_seen(Request("http://127.0.0.1/b"))
    assert round_trips() == 3  # the claim of /b, and /a done, in one script call
    assert other.request_seen(Request(first.url))  # done
    assert round_trips() == 4
    assert django_bloom.get_filter("requests").contains(fingerprint)
    crawler.close("finished")
    other.close("finished")


@pytest.mark.django_db
def test_redis_down_deduplicates_in_process_fast_and_says_so(caplog):
    from scrapy import Request

    import django_bloom
    from django_bloom.models import BloomFilter

    django_bloom.create_filter("requests", capacity=1000)
    BloomFilter.objects.filter(name="requests").update(cache_alias="dead")
    django_bloom.get_filter("requests", refresh=True)
    dupefilter = in_process_filter()
    urls = ["http://127.0.0.1/a", "http://127.0.0.1/a", "http://127.0.0.1/b", "http://127.0.0.1/a"]
    started = time.monotonic()
    assert [dupefilter.request_seen(Request(url)) for url in urls] == [False, True, False, True]
    assert time.monotonic() - started < 1.0  # milliseconds, not seconds
    assert dupefilter.stats.values["bloom_dupefilter/unavailable"] == 2  # /a and /b
    assert sum("deduplicating in this process" in r.getMessage() for r in caplog.records) == 1
    dupefilter.close("finished")
