"""Scrapy dupefilters on one private Redis, same run: django-bloom vs scrapy-redis (its SADD
set) vs scrapy-redis-bloomfilter (run by hand; issue 29).

    python -m bench.scrapy_dupefilter [--pages 1500] [--rounds 3] [--main PATH]
                                      [--crawler-urls 1000000] [--set-sample 200000]

Needs the bench extra (scrapy, scrapy-redis, scrapy-redis-bloomfilter). Starts a
private redis-server on a free port of 127.0.0.1 (maxmemory 1 GB, stopped by PID).

Throughput: what a crawl pays per page, all of it timed: ``request_done`` for the page's
response (the first new link of the page before: Scrapy's ``response_received``), then
``request_seen`` for each of its links as Scrapy calls it while parsing: 10 new and 10
repeats (links of the last 50 pages). Rounds alternate between the dupefilters page by
page, fresh URLs for each; the median of the rounds, in calls/s (21 per page), its ratio
to scrapy-redis's SADD dupefilter (the anchor; scrapy-redis has no ``request_done``: a
response costs it nothing), and the CPU time a page cost this process and Redis (INFO cpu
before and after each page, outside the timing, less INFO's own share).
django-bloom is timed directly, from inside a running asyncio loop (Scrapy's reactor),
and with a re-crawl window (``recrawl_seconds``: a rotating done filter). ``--main PATH``
adds the dupefilter module of another checkout (e.g. /work/main's) as a row: the A/B.

Crawler memory: what the dupefilter holds after ``--crawler-urls`` new URLs and a
response per 10 of them (tracemalloc, the requests themselves dropped). Redis memory per
URL at 10,000,000 URLs: the done filter's key (MEMORY USAGE of one made at that
capacity) plus one crawl's live claim bitmaps (computed from their size), against
scrapy-redis's set (MEMORY USAGE per member measured at ``--set-sample`` members,
extrapolated).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import importlib.util
import os
import statistics
import sys
import tempfile
import time
import tracemalloc
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.anchor import AnchorServer  # noqa: E402

NEW_PER_PAGE, REPEATS_PER_PAGE, RECENT_PAGES = 10, 10, 50
CALLS_PER_PAGE = NEW_PER_PAGE + REPEATS_PER_PAGE + 1  # and the page's response
TEN_MILLION = 10_000_000
ANCHOR = "scrapy-redis RFPDupeFilter (SADD, the anchor)"
GETBIT = "scrapy-redis-bloomfilter (a GETBIT per hash, 6 hashes, 2^30 bits)"
DIRECT = "django-bloom BloomDupeFilter, direct"
WINDOW = "django-bloom, a re-crawl window (BLOOM_RECRAWL_SECONDS: rotating done filter)"


def pages(count: int, tag: str) -> list[tuple]:
    """Per page, its response's request and the requests Scrapy asks the dupefilter about
    while parsing it: 10 new, 10 repeats."""
    from scrapy import Request

    out, seen, response = [], [], Request(f"http://example.org/{tag}/start")
    for page in range(count):
        new = [f"http://example.org/{tag}/{page}/{i}?q={i}" for i in range(NEW_PER_PAGE)]
        recent = seen[-RECENT_PAGES * NEW_PER_PAGE :] or new
        repeats = [
            recent[(page * 7919 + i * 104729) % len(recent)] for i in range(REPEATS_PER_PAGE)
        ]
        seen += new
        links = [Request(url) for url in new + repeats]
        out.append((response, links))
        response = links[0]  # fetched next
    return out


def crawl(dupefilter, page) -> tuple[float, float]:
    """Seconds one page cost, and this process's CPU seconds of them: its response, then
    the request_seen of each of its links."""
    response, links = page
    done = getattr(dupefilter, "request_done", None)
    started, cpu = time.perf_counter(), time.process_time()
    if done is not None:
        done(response)
    for request in links:
        dupefilter.request_seen(request)
    return time.perf_counter() - started, time.process_time() - cpu


def redis_cpu(server) -> float:
    """Redis's CPU seconds so far (INFO cpu: commands, scripts, reading and replying)."""
    stats = server.info("cpu")
    return stats["used_cpu_user"] + stats["used_cpu_sys"]


def in_loop(dupefilter, page) -> tuple[float, float]:
    async def run():
        return crawl(dupefilter, page)

    return asyncio.run(run())


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pages", type=int, default=1500)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--main", help="another checkout's django_bloom/contrib/scrapy.py (A/B)")
    ap.add_argument("--crawler-urls", type=int, default=1_000_000)
    ap.add_argument("--set-sample", type=int, default=200_000)
    args = ap.parse_args(argv)
    with AnchorServer(None) as url, tempfile.TemporaryDirectory(prefix="bloom-scrapy-") as tmp:
        import redis

        redis.Redis.from_url(url).config_set("maxmemory", "1gb")
        os.environ["BENCH_REDIS_URL"] = url
        os.environ["BENCH_PREFIX"] = f"bench-{uuid.uuid4().hex[:8]}"
        os.environ["BENCH_SCRAPY_DB"] = f"{tmp}/bench.sqlite3"
        os.environ["DJANGO_SETTINGS_MODULE"] = "bench.scrapy_settings"
        import django

        django.setup()
        from django.core.management import call_command

        call_command("migrate", verbosity=0)
        throughput(url, args)
        crawler_memory(args.crawler_urls)
        redis_memory(url, args.set_sample)
        from django_bloom import counters

        counters.flush_all()  # now, while the database file exists (not at exit)


def throughput(url: str, args) -> None:
    import redis
    from scrapy.utils.request import RequestFingerprinter
    from scrapy_redis.dupefilter import RFPDupeFilter as SetDupeFilter
    from scrapy_redis_bloomfilter.dupefilter import RFPDupeFilter as GetbitDupeFilter

    from django_bloom.contrib.scrapy import BloomDupeFilter

    server = redis.Redis.from_url(url)
    fingerprinter = RequestFingerprinter()
    capacity = 2 * args.pages * NEW_PER_PAGE * args.rounds
    bloom = BloomDupeFilter("bench-direct", capacity=capacity, fingerprinter=fingerprinter)
    looped = BloomDupeFilter("bench-loop", capacity=capacity, fingerprinter=fingerprinter)
    window = BloomDupeFilter(
        "bench-window", capacity=capacity, recrawl_seconds=86_400, fingerprinter=fingerprinter
    )
    rows = {
        ANCHOR: (crawl, SetDupeFilter(server, key="bench:dupefilter")),
        GETBIT: (crawl, GetbitDupeFilter(server, "bench:getbit", False, 30, 6)),
        DIRECT: (crawl, bloom),
        "django-bloom BloomDupeFilter, in an asyncio loop": (in_loop, looped),
        WINDOW: (crawl, window),
    }
    if args.main:
        spec = importlib.util.spec_from_file_location("main_scrapy", args.main)
        old = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(old)
        row = old.BloomDupeFilter("bench-main", capacity=capacity, fingerprinter=fingerprinter)
        rows["the same, --main's module (A/B), in an asyncio loop"] = (in_loop, row)
    for _call, dupefilter in rows.values():
        if hasattr(dupefilter, "open"):
            dupefilter.open()
    spent: dict[str, list[float]] = {name: [0.0] * args.rounds for name in rows}
    cpu = {name: [0.0, 0.0] for name in rows}  # client, Redis CPU seconds
    gaps = [redis_cpu(server) - redis_cpu(server) for _ in range(200)]  # INFO's own share
    info = -statistics.median(gaps)
    for r in range(args.rounds):  # page by page, each dupefilter in turn: the same load
        batches = {name: pages(args.pages, f"{r}-{i}") for i, name in enumerate(rows)}
        for n in range(args.pages):
            for name, (call, dupefilter) in rows.items():
                before = redis_cpu(server)
                wall, client = call(dupefilter, batches[name][n])
                spent[name][r] += wall
                cpu[name][0] += client
                cpu[name][1] += redis_cpu(server) - before - info
    calls = args.pages * CALLS_PER_PAGE
    rates = {name: [calls / s for s in values] for name, values in spent.items()}
    anchor = statistics.median(rates[ANCHOR])
    print(
        f"{args.pages:,} pages x (1 request_done + {NEW_PER_PAGE + REPEATS_PER_PAGE} "
        f"request_seen: {NEW_PER_PAGE} new, {REPEATS_PER_PAGE} repeats) per round, "
        f"{args.rounds} rounds, page by page in turn; private Redis {url}"
    )
    print("| dupefilter | calls/s (median) | rounds | ratio to SADD | CPU us/page: ours, Redis |")
    print("|---|---|---|---|---|")
    for name, values in rates.items():
        median = statistics.median(values)
        spread = ", ".join(f"{v:,.0f}" for v in values)
        client, redis_cpu_s = (x / (args.pages * args.rounds) for x in cpu[name])
        print(
            f"| {name} | {median:,.0f} | {spread} | {median / anchor:.2f}x | "
            f"{client * 1e6:,.0f}, {redis_cpu_s * 1e6:,.0f} |"
        )
    direct, getbit = statistics.median(rates[DIRECT]), statistics.median(rates[GETBIT])
    print(f"django-bloom direct / scrapy-redis-bloomfilter: {direct / getbit:.2f}x")
    for _call, dupefilter in rows.values():
        if hasattr(dupefilter, "_worker"):
            dupefilter.close("finished")


def crawler_memory(count: int) -> None:
    from scrapy import Request
    from scrapy.utils.request import RequestFingerprinter

    from django_bloom.contrib.scrapy import BloomDupeFilter

    dupefilter = BloomDupeFilter(
        "bench-memory-crawler", capacity=count, fingerprinter=RequestFingerprinter()
    )
    dupefilter.open()
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    started = time.perf_counter()
    print(f"\ncrawler memory (tracemalloc; the requests themselves dropped), {count:,} new URLs:")
    print("| new URLs | dupefilter holds | bytes per URL |")
    print("|---|---|---|")
    for i in range(count):
        request = Request(f"http://example.org/memory/{i}")
        dupefilter.request_seen(request)
        if i % NEW_PER_PAGE == 0:
            dupefilter.request_done(request)  # a page's response per 10 new links
        if (i + 1) % (count // 4) == 0:
            gc.collect()
            held = tracemalloc.get_traced_memory()[0] - before
            print(f"| {i + 1:,} | {held / 2**20:.2f} MiB | {held / (i + 1):.1f} |")
    tracemalloc.stop()
    print(f"({time.perf_counter() - started:.0f} s)")
    dupefilter.close("finished")


def redis_memory(url: str, sample: int) -> None:
    import redis

    import django_bloom
    from django_bloom.contrib import scrapy as contrib
    from django_bloom.engine import sizing

    server = redis.Redis.from_url(url)
    rate = contrib.DEFAULT_ERROR_RATE
    done = django_bloom.create_filter("bench-memory", capacity=TEN_MILLION, error_rate=rate)
    done_bytes = server.memory_usage(done.layout.segment.keys.bits, samples=0)
    slices = contrib.claim_options(contrib.DEFAULT_CLAIM_SECONDS)["slices"]
    per_slice = -(-contrib.DEFAULT_CLAIM_CAPACITY // slices)
    claim_bits, _k = sizing.standard_geometry(per_slice, rate / (slices + 1))
    claims_bytes = (slices + 1) * claim_bits // 8  # the live slices of one crawl
    key = "bench:memory-set"
    pipe = server.pipeline(transaction=False)
    for i in range(sample):
        pipe.sadd(key, uuid.uuid5(uuid.NAMESPACE_URL, str(i)).hex + "abcdefgh")  # 40 hex chars
        if i % 10_000 == 9_999:
            pipe.execute()
    pipe.execute()
    set_per_url = server.memory_usage(key, samples=0) / sample
    ours = (done_bytes + claims_bytes) / TEN_MILLION
    print(f"\nRedis memory per URL at {TEN_MILLION:,} URLs (p = {rate:g}):")
    print("| what | bytes per URL | total |")
    print("|---|---|---|")
    print(
        f"| django-bloom: done filter ({done_bytes / 2**20:.1f} MiB) + one crawl's claims "
        f"({claims_bytes / 2**20:.1f} MiB) | {ours:.2f} | "
        f"{(done_bytes + claims_bytes) / 2**20:.1f} MiB |"
    )
    print(
        f"| scrapy-redis set (40-char hex, measured at {sample:,} members) | {set_per_url:.1f} | "
        f"{set_per_url * TEN_MILLION / 2**20:.0f} MiB |"
    )
    print(f"ratio: {ours / set_per_url:.3f} (1/{set_per_url / ours:.0f})")
    server.delete(key)
    done.delete()


if __name__ == "__main__":
    main()
