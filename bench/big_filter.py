"""A filter beyond one Redis string, for real (not in CI): created, bulk-loaded, checked.

    python -m bench.big_filter [--capacity 1000000000] [--p 0.001] [--load 20000000] [--rebuild]

Starts a private redis-server on a free port (no persistence), creates a standard
filter of ``--capacity`` at ``--p`` (1e9 at 0.001: 1.8 GB, more than Redis's 512 MiB
string limit, so ``create_filter`` makes it ``sharded``), adds ``--load`` items in
batches of 10,000 (``add_many``: one round trip per batch; with ``--rebuild``:
one ``rebuild()``, built in process and uploaded segment by segment), then checks a sample
of them (every one present), measures the false-positive rate on items never
added, times ``stats()`` (BITCOUNT over every segment) and reports Redis's memory.
Stops the server by PID.
"""

from __future__ import annotations

import argparse
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

BATCH = 10_000


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.big_filter")
    ap.add_argument("--capacity", type=int, default=1_000_000_000)
    ap.add_argument("--p", type=float, default=0.001)
    ap.add_argument("--load", type=int, default=20_000_000, help="items to add")
    ap.add_argument(
        "--rebuild", action="store_true", help="bulk-load with rebuild() (in-process build)"
    )
    args = ap.parse_args(argv)

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    workdir = Path(tempfile.mkdtemp(prefix="bloom-big-"))
    server = subprocess.Popen(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
         "--appendonly", "no", "--dir", str(workdir),
         "--logfile", str(workdir / "redis.log")],
    )  # fmt: skip
    try:
        import redis

        client = redis.Redis(port=port)
        for _ in range(200):
            try:
                client.ping()
                break
            except redis.ConnectionError:
                time.sleep(0.05)
        import django
        from django.conf import settings

        settings.configure(
            SECRET_KEY="bench",
            USE_TZ=True,
            INSTALLED_APPS=["django.contrib.contenttypes", "django.contrib.auth", "django_bloom"],
            DATABASES={
                "default": {
                    "ENGINE": "django.db.backends.sqlite3",
                    "NAME": str(workdir / "db.sqlite3"),  # the counters flusher needs a file
                }
            },
            CACHES={
                "default": {
                    "BACKEND": "django_redis.cache.RedisCache",
                    "LOCATION": f"redis://127.0.0.1:{port}/0",
                }
            },
            DEFAULT_AUTO_FIELD="django.db.models.BigAutoField",
            DJANGO_BLOOM={"SLOW_COMMAND_TIMEOUT": 120.0, "SOCKET_TIMEOUT": 10.0},
        )
        django.setup()
        from django.core.management import call_command

        import django_bloom

        call_command("migrate", verbosity=0)
        base = client.info("memory")["used_memory"]
        started = time.perf_counter()
        f = django_bloom.create_filter("big", capacity=args.capacity, error_rate=args.p)
        created = time.perf_counter() - started
        meta = f.meta
        print(
            f"created {str(meta.layout)!r} filter: n={args.capacity:,} p={args.p} "
            f"m={meta.num_bits:,} bits ({meta.num_bits / 8 / 2**30:.2f} GiB) k={meta.num_hashes}, "
            f"{len(f.layout.segments)} segments of {f.layout.segments[0].num_bytes / 2**20:,.0f} "
            f"MiB, in {created:.2f} s"
        )
        started = time.perf_counter()
        if args.rebuild:
            f.rebuild(f"item-{i}" for i in range(args.load))
        else:
            for start in range(0, args.load, BATCH):
                f.add_many([f"item-{i}" for i in range(start, min(start + BATCH, args.load))])
        loaded = time.perf_counter() - started
        how = "rebuilt from" if args.rebuild else "added"
        print(f"{how} {args.load:,} items in {loaded:.1f} s ({args.load / loaded:,.0f} items/s)")
        step = max(1, args.load // 100_000)
        sample = [f"item-{i}" for i in range(0, args.load, step)]
        present = sum(f.contains_many(sample))
        absent = [f"never-{i}" for i in range(100_000)]
        false = sum(f.contains_many(absent))
        print(f"present: {present:,}/{len(sample):,} of a sample of the added items")
        print(f"false positives on 100,000 never-added items: {false} (fill is tiny: ~0 expected)")
        started = time.perf_counter()
        stats = f.stats()
        counted = time.perf_counter() - started
        used = client.info("memory")["used_memory"] - base
        print(
            f"stats(): {stats.bits_set:,} bits set, ~{stats.estimated_items:,.0f} items, "
            f"in {counted:.1f} s; memory_bytes={stats.memory_bytes:,}; Redis used_memory "
            f"grew {used / 2**30:.2f} GiB"
        )
        return 0 if present == len(sample) else 1
    finally:
        server.kill()  # by PID
        server.wait(timeout=30)


if __name__ == "__main__":
    sys.exit(main())
