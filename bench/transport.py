"""Same-run A/B of the hand-written transport against plain redis-py, single ``contains``.

    python -m bench.transport [--n 5000] [--rounds 7]

Three ways to send the same read of one item (its k bits and the trailer's fingerprint,
one ``BITFIELD_RO``), alternated round by round against the same Redis:

- ``engine``: ``Filter.contains``: RESP bytes packed by ``transport/packing.py`` on a kept
  connection (``transport/connections.py``), the reply read by our reader;
- ``packed+pool``: the same packed bytes sent on a connection borrowed from redis-py's
  pool and released after each call (redis-py's pool, our packing);
- ``redis-py``: ``execute_command("BITFIELD_RO", ...)`` through the django-redis client
  (redis-py packs the command and parses the reply; its pool).

Prints median microseconds per call and the ratios to ``engine``: the figure that decides
whether packing and kept connections stay (docs/architecture.md).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
import uuid


def setup() -> None:
    """bench/settings.py with a key prefix of this run's own (``BENCH_REDIS_URL``)."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bench.settings")
    os.environ.setdefault("BENCH_PREFIX", f"bench-transport-{uuid.uuid4().hex[:8]}")
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    setup()
    from django_redis import get_redis_connection

    import django_bloom
    from django_bloom.engine.transport.packing import pack_test

    f = django_bloom.create_filter("transport", capacity=100_000, error_rate=0.01)
    f.add_many([f"item-{i}" for i in range(1000)])
    segment = f.layout.segment
    client = get_redis_connection("default")
    pool = client.connection_pool
    items = [f"item-{i % 2000}" for i in range(args.n)]
    t_bit = segment.trailer_offset * 8

    def engine() -> None:
        for item in items:
            f.contains(item)

    def packed_pool() -> None:
        for item in items:
            payload = pack_test(segment, f._digest_one(item)[1]).payload
            conn = pool.get_connection()
            try:
                conn.send_packed_command([payload])
                conn.read_response()
            finally:
                pool.release(conn)

    def redis_py() -> None:
        for item in items:
            flat = f._digest_one(item)[1]
            ops = [part for g in flat for part in ("GET", "u1", g)]
            reply = client.execute_command(
                "BITFIELD_RO", segment.keys.bits, "GET", "u32", t_bit, *ops
            )
            all(reply[1:])

    ways = {"engine": engine, "packed+pool": packed_pool, "redis-py": redis_py}
    times: dict[str, list[float]] = {name: [] for name in ways}
    for round_ in range(args.rounds):
        order = list(ways) if round_ % 2 == 0 else list(reversed(ways))
        for name in order:
            start = time.perf_counter()
            ways[name]()
            times[name].append((time.perf_counter() - start) / args.n * 1e6)
    base = statistics.median(times["engine"])
    print(f"single contains, n={args.n} x {args.rounds} alternating rounds (median µs/call)")
    for name, values in times.items():
        median = statistics.median(values)
        print(f"  {name:12s} {median:8.1f} µs   {median / base:5.2f}x engine")
    f.delete()


if __name__ == "__main__":
    main()
