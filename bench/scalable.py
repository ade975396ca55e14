"""The scalable layout's cost: scalable vs standard filters, same run, alternating slices.

Two filters: a standard one sized for all the items, and a scalable one started at
1/16 of that capacity and grown (growth 2) to hold them all (5 sub-filters). Every
workload alternates slices between them and keeps the median slice (as bench/keyed.py),
so a noisy minute on a shared machine hits both alike. ``vs_standard`` < 1 means the
scalable filter is slower.

Standalone (no RedisBloom needed)::

    BENCH_REDIS_URL=redis://127.0.0.1:6379/0 python -m bench.scalable [--n 100000]
"""

from __future__ import annotations

from bench.keyed import alternate

SLICE = 250  # single operations per alternating slice
BATCH = 1000  # items per batch operation
GROWTH_START = 16  # the scalable filter starts at n / 16 and grows to hold n


def _slices(items, size):
    return [items[i : i + size] for i in range(0, len(items) - size + 1, size)]


def measure(create_filter, items, probes, single, record, results, p: float = 0.01) -> None:
    """Add the scalable rows to ``results`` (through the bench's ``record``)."""
    n = len(items)
    standard = create_filter("bench-standard-vs-scalable", capacity=n, error_rate=p)
    scalable = create_filter(
        "bench-scalable", capacity=max(1, n // GROWTH_START), error_rate=p, layout="scalable"
    )
    try:
        # Load both (alternating batches): the scalable filter grows on the way.
        loads = alternate([standard.add_many, scalable.add_many], _slices(items, BATCH))
        row = _row(record, results)
        row("batch add while growing (items/s)", BATCH / loads[1], BATCH / loads[0])
        subs = scalable.stats().details["sub_filters"]
        results["batch add while growing (items/s)"]["sub_filters"] = subs

        for method, source in (("add", probes[:single]), ("contains", items[:single])):
            methods = [getattr(h, method) for h in (standard, scalable)]
            calls = [lambda g, f=f: [f(x) for x in g] for f in methods]
            std_s, sc_s = alternate(calls, _slices(source, SLICE))
            row(f"single {method} [scalable] (ops/s)", SLICE / sc_s, SLICE / std_s)

        batches = _slices(probes[single:] + items, BATCH)[: max(10, single // BATCH)]
        std_s, sc_s = alternate([standard.contains_many, scalable.contains_many], batches)
        row("batch contains [scalable] (items/s)", BATCH / sc_s, BATCH / std_s)
        fresh = [f"fresh-{i}" for i in range(len(batches) * BATCH)]
        std_s, sc_s = alternate([standard.add_many, scalable.add_many], _slices(fresh, BATCH))
        row("batch add [scalable] (items/s)", BATCH / sc_s, BATCH / std_s)
        mem_std = standard.stats().memory_bytes
        mem_sc = scalable.stats().memory_bytes
        record("memory [scalable] (bytes)", "bytes", mem_sc, None, None, higher_is_better=False)
        results["memory [scalable] (bytes)"].update(standard=mem_std, vs_standard=mem_std / mem_sc)
    finally:
        standard.delete()
        scalable.delete()


def _row(record, results):
    def row(name, scalable_value, standard_value):
        record(name, "ops/s" if "ops" in name else "items/s", scalable_value, None, None)
        results[name].update(standard=standard_value, vs_standard=scalable_value / standard_value)

    return row


def main(argv=None) -> None:
    import argparse
    import os
    import sys
    import uuid
    from pathlib import Path

    ap = argparse.ArgumentParser(prog="python -m bench.scalable")
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--single", type=int, default=3000)
    args = ap.parse_args(argv)
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bench.settings")
    os.environ.setdefault("BENCH_PREFIX", f"bench-{uuid.uuid4().hex[:8]}")
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    import django_bloom

    results: dict = {}

    def record(name, unit, ours, anchor=None, naive=None, target=None, higher_is_better=True):
        results[name] = {"unit": unit, "ours": ours, "higher_is_better": higher_is_better}

    items = [f"item-{i}" for i in range(args.n)]
    probes = [f"probe-{i}" for i in range(args.n)]
    measure(django_bloom.create_filter, items, probes, args.single, record, results)
    for name, row in results.items():
        extra = f"  standard {row['standard']:>12,.0f}  vs_standard {row['vs_standard']:.2f}"
        print(f"{name:<42} {row['ours']:>12,.0f}{extra}")


if __name__ == "__main__":
    main()
