"""Scrapy dupefilters on one private Redis: django-bloom vs scrapy-redis (run by hand).

    python -m bench.scrapy_dupefilter [--requests 50000] [--million 1000000]

Needs the bench extra (scrapy, scrapy-redis). Starts a private redis-server on
a free port of 127.0.0.1 (stopped by PID afterwards) and, for the same fresh
requests, times ``request_seen`` (one call per request, half of them repeats):

- django-bloom's ``BloomDupeFilter`` called directly, and from inside a running
  asyncio loop (what Scrapy's default reactor does: the call then hops to the
  dupefilter's worker thread, where the ORM is allowed);
- scrapy-redis's ``RFPDupeFilter`` (one SADD per request into a Redis set).

Memory: MEMORY USAGE of a django-bloom filter sized for ``--million``
fingerprints at p = 1e-6 (the dupefilter's default rate) vs a scrapy-redis set
holding ``--million`` fingerprints (filled with pipelined SADD).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.anchor import AnchorServer  # noqa: E402


def requests(n: int, tag: str) -> list:
    from scrapy import Request

    return [
        Request(f"http://example.org/{tag}/{i % (n // 2)}?page={i % (n // 2)}") for i in range(n)
    ]


def timed(seen, batch) -> tuple[float, int]:
    started = time.perf_counter()
    duplicates = sum(1 for request in batch if seen(request))
    return len(batch) / (time.perf_counter() - started), duplicates


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=50_000)
    ap.add_argument("--million", type=int, default=1_000_000)
    args = ap.parse_args(argv)
    with AnchorServer(None) as url, tempfile.TemporaryDirectory(prefix="bloom-scrapy-") as tmp:
        os.environ["BENCH_REDIS_URL"] = url
        os.environ["BENCH_PREFIX"] = f"bench-{uuid.uuid4().hex[:8]}"
        os.environ["BENCH_SCRAPY_DB"] = f"{tmp}/bench.sqlite3"
        os.environ["DJANGO_SETTINGS_MODULE"] = "bench.scrapy_settings"
        import django

        django.setup()
        from django.core.management import call_command

        call_command("migrate", verbosity=0)
        run(url, args.requests, args.million)


def run(url: str, n: int, million: int) -> None:
    import redis
    from scrapy.utils.request import RequestFingerprinter
    from scrapy_redis.dupefilter import RFPDupeFilter as RedisSetDupeFilter

    import django_bloom
    from django_bloom.contrib.scrapy import BloomDupeFilter

    fingerprinter = RequestFingerprinter()
    rows = []
    bloom = BloomDupeFilter("bench-direct", capacity=max(n, million), fingerprinter=fingerprinter)
    bloom.open()
    rows.append(
        ("django-bloom BloomDupeFilter, direct", *timed(bloom.request_seen, requests(n, "a")))
    )

    hopping = BloomDupeFilter("bench-loop", capacity=max(n, million), fingerprinter=fingerprinter)
    hopping.open()

    async def in_loop():
        return timed(hopping.request_seen, requests(n, "b"))

    rows.append(("django-bloom BloomDupeFilter, in an asyncio loop", *asyncio.run(in_loop())))

    server = redis.Redis.from_url(url)
    sets = RedisSetDupeFilter(server, key="bench:dupefilter")  # its own SHA1 fingerprint
    rows.append(("scrapy-redis RFPDupeFilter (SADD)", *timed(sets.request_seen, requests(n, "c"))))

    print(f"{n} requests, {n // 2} distinct; private redis-server at {url}")
    print("| dupefilter | fingerprints/s | duplicates found |")
    print("|---|---|---|")
    for name, rate, duplicates in rows:
        print(f"| {name} | {rate:,.0f} | {duplicates:,} |")

    sized = django_bloom.create_filter("bench-memory", capacity=million, error_rate=1e-6)
    bloom_bytes = sum(server.memory_usage(key) or 0 for key in server.scan_iter("*bench-memory*"))
    key = "bench:memory-set"
    pipe = server.pipeline(transaction=False)
    for i in range(million):
        pipe.sadd(key, fingerprinter.fingerprint(requests(2, f"m{i}")[0]).hex())
        if i % 10_000 == 9_999:
            pipe.execute()
    pipe.execute()
    set_bytes = server.memory_usage(key, samples=0)
    print(f"\nmemory for {million:,} fingerprints (MEMORY USAGE):")
    bits = f"{sized.meta.num_bits:,} bits"
    print(f"| django-bloom filter (p = 1e-6, {bits}) | {bloom_bytes / 2**20:.1f} MiB |")
    print(f"| scrapy-redis set (40-char hex fingerprints) | {set_bytes / 2**20:.1f} MiB |")
    bloom.close("finished")
    hopping.close("finished")
    from django_bloom.ops import counters

    counters.flush_all()  # now, while the database file exists (not at exit)


if __name__ == "__main__":
    main()
