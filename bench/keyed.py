"""Keyed hashing's cost: keyed BLAKE2b vs MurmurHash3, same run, alternating slices.

Two filters of the same size, one per scheme; every workload alternates
slices of 250 operations (10,000 items for bulk hashing) between them and
keeps the median slice, so a noisy minute on a shared machine hits both alike.
Rows report the keyed filter, murmur3's figure and their ratio
(``vs_murmur3``; < 1 means keyed is slower).
"""

from __future__ import annotations

import statistics
import time

from django_bloom.engine import hashers

SLICE = 250  # operations per alternating slice
BULK_SLICE = 10_000  # items per alternating slice of bulk hashing
BULK_ITEMS = 200_000


def alternate(calls, groups) -> list[float]:
    """Median seconds per group for each callable, run on every group in turn, alternating.

    Medians of many short alternating slices: a burst of another process's work
    lands in a few slices of both schemes and moves neither median much.
    """
    spent: list[list[float]] = [[] for _ in calls]
    for group in groups:
        for i, call in enumerate(calls):
            start = time.perf_counter()
            call(group)
            spent[i].append(time.perf_counter() - start)
    return [statistics.median(times) for times in spent]


def _slices(items, size):
    return [items[i : i + size] for i in range(0, len(items) - size + 1, size)]


def measure(create_filter, items, probes, single, record, results) -> None:
    """Add the keyed rows to ``results`` (through the bench's ``record``)."""
    keyed = create_filter("bench-keyed", capacity=len(items), error_rate=0.01)
    legacy = create_filter("bench-murmur3", capacity=len(items), error_rate=0.01, hasher="murmur3")
    assert keyed.hasher.scheme == hashers.BLAKE2B and legacy.hasher.scheme == hashers.MURMUR3
    for handle in (keyed, legacy):  # warm-up
        for i in range(200):
            handle.add(f"warm{i}")
            handle.contains(f"warm{i}")

    def row(name, unit, keyed_value, murmur3_value, higher_is_better=True):
        record(name, unit, keyed_value, None, None, higher_is_better=higher_is_better)
        # < 1 means keyed is slower, for rates (keyed / murmur3) and costs (murmur3 / keyed)
        ratio = keyed_value / murmur3_value
        results[name].update(
            murmur3=murmur3_value, vs_murmur3=ratio if higher_is_better else 1 / ratio
        )

    for method, source in (("add", items[:single]), ("contains", probes[:single])):
        methods = [getattr(h, method) for h in (keyed, legacy)]
        calls = [lambda g, f=f: [f(x) for x in g] for f in methods]
        k_s, m_s = alternate(calls, _slices(source, SLICE))
        row(f"single {method} [keyed] (ops/s)", "ops/s", SLICE / k_s, SLICE / m_s)

    groups = _slices(items[:BULK_ITEMS], min(BULK_SLICE, len(items) // 10))
    k_s, m_s = alternate([keyed.hasher.item_digests, legacy.hasher.item_digests], groups)
    us = 1e6 / len(groups[0])
    row("hashing per item, bulk [keyed] (us)", "us", k_s * us, m_s * us, False)

    calls = [lambda g, h=h: [h._digest_one(x) for x in g] for h in (keyed, legacy)]
    k_s, m_s = alternate(calls, _slices(probes[:single], SLICE))
    us = 1e6 / SLICE
    row("hashing per single op [keyed] (us)", "us", k_s * us, m_s * us, False)
    keyed.delete()
    legacy.delete()
