"""Counting filters' cost: layout ``counting`` vs ``standard``, same run, alternating slices.

    python -m bench.counting [--n 200000] [--single 3000] [--batch-size 1000] [--batches 30]

Two filters of the same capacity and error rate (so the same m and k), one per
layout, on a private redis-server started for the run (``--shared-redis``: the
Redis of ``BENCH_REDIS_URL``, default 127.0.0.1:6379). Every
workload alternates slices of ``SLICE`` operations (or one batch) between them and
keeps the median slice, so a noisy moment on a shared machine hits both alike.
``remove`` has no standard counterpart: its ratio is against the standard layout's
``add`` (the write it undoes). Rows: ops/s of counting, of standard, and
``vs_standard`` (< 1: counting is slower).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import uuid
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

SLICE = 250


def parse_args(argv=None):
    ap = argparse.ArgumentParser(
        prog="python -m bench.counting", description=__doc__.splitlines()[0]
    )
    ap.add_argument("--n", type=int, default=200_000, help="capacity of both filters")
    ap.add_argument("--single", type=int, default=3000, help="single operations per workload")
    ap.add_argument("--batch-size", type=int, default=1000)
    ap.add_argument("--batches", type=int, default=30)
    ap.add_argument("--quick", action="store_true", help="tiny run for smoke tests")
    ap.add_argument("--json", default=None, help="also write the rows here")
    ap.add_argument(
        "--shared-redis",
        action="store_true",
        help="use BENCH_REDIS_URL (default 127.0.0.1:6379) instead of a private redis-server",
    )
    args = ap.parse_args(argv)
    if args.quick:
        args.n, args.single, args.batches, args.batch_size = 20_000, 500, 4, 500
    return args


def _median_rates(calls, groups, per_group) -> list[float]:
    """Ops/s (median over groups) of each callable, run on every group in turn."""
    spent: list[list[float]] = [[] for _ in calls]
    for group in groups:
        for i, call in enumerate(calls):
            start = time.perf_counter()
            call(group)
            spent[i].append(time.perf_counter() - start)
    return [per_group / statistics.median(times) for times in spent]


def _each(method):
    def run(items):
        for item in items:
            method(item)

    return run


def measure(args) -> list[dict]:
    import django

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bench.settings")
    os.environ["BENCH_PREFIX"] = f"bench-counting-{uuid.uuid4().hex[:8]}"
    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    import django_bloom

    standard = django_bloom.create_filter("bench-standard", capacity=args.n, error_rate=0.01)
    counting = django_bloom.create_filter(
        "bench-counting", capacity=args.n, error_rate=0.01, layout="counting"
    )
    try:
        assert standard.meta.num_bits == counting.meta.num_bits
        for handle in (standard, counting):  # warm-up: connections, scripts loaded
            for i in range(100):
                handle.add(f"warm{i}")
                handle.contains(f"warm{i}")
        counting.remove("warm0")
        single = [f"s{i}" for i in range(args.single)]
        singles = [single[i : i + SLICE] for i in range(0, len(single) - SLICE + 1, SLICE)]
        size = args.batch_size
        batch = [[f"b{j}-{i}" for i in range(size)] for j in range(args.batches)]
        rows = []

        def row(workload, per, c_rate, s_rate, against="same workload"):
            rows.append(
                {
                    "workload": workload,
                    "items_per_op": per,
                    "counting_ops_s": round(c_rate),
                    "standard_ops_s": round(s_rate),
                    "vs_standard": round(c_rate / s_rate, 3),
                    "standard_ran": against,
                }
            )

        c, s = _median_rates([_each(counting.add), _each(standard.add)], singles, SLICE)
        row("add", 1, c, s)
        c, s = _median_rates([_each(counting.contains), _each(standard.contains)], singles, SLICE)
        row("contains", 1, c, s)
        removed, re_added = _median_rates(
            [_each(counting.remove), _each(standard.add)], singles, SLICE
        )
        row("remove", 1, removed, re_added, "add")
        c, s = _median_rates([counting.add_many, standard.add_many], batch, size)
        row("add_many", size, c, s)
        c, s = _median_rates([counting.contains_many, standard.contains_many], batch, size)
        row("contains_many", size, c, s)
        c, s = _median_rates([counting.remove_many, standard.add_many], batch, size)
        row("remove_many", size, c, s, "add_many")
        return rows
    finally:
        counting.delete()
        standard.delete()


def main(argv=None) -> None:
    args = parse_args(argv)
    if args.shared_redis:
        rows = measure(args)
    else:  # a private redis-server: other users of a shared one would time out our calls
        from bench.anchor import AnchorServer

        with AnchorServer(None) as url:
            os.environ["BENCH_REDIS_URL"] = url
            rows = measure(args)
    print(f"{'workload':<14}{'items/op':>9}{'counting/s':>12}{'standard/s':>12}{'ratio':>8}  vs")
    for r in rows:
        print(
            f"{r['workload']:<14}{r['items_per_op']:>9}{r['counting_ops_s']:>12,}"
            f"{r['standard_ops_s']:>12,}{r['vs_standard']:>8.2f}  standard {r['standard_ran']}"
        )
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
