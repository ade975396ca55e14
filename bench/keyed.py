"""Keyed hashing's cost: keyed BLAKE2b vs MurmurHash3, same run, alternating slices.

Two filters of the same size, one per scheme; every workload alternates
slices of 250 operations (or bulk rounds) between them, so a noisy minute on a
shared machine hits both alike. Rows report the keyed filter and its ratio to
murmur3 (``vs_murmur3``; < 1 for rates means keyed is slower).
"""

from __future__ import annotations

import time

from django_bloom import hashers

SLICE = 250
BULK_ROUNDS = 5


def _alternate(calls, groups) -> list[float]:
    """Seconds per callable, each run on every group in turn, in alternation."""
    spent = [0.0] * len(calls)
    for group in groups:
        for i, call in enumerate(calls):
            start = time.perf_counter()
            call(group)
            spent[i] += time.perf_counter() - start
    return spent


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
        slices = [source[i : i + SLICE] for i in range(0, len(source), SLICE)]
        methods = [getattr(h, method) for h in (keyed, legacy)]
        calls = [lambda g, f=f: [f(x) for x in g] for f in methods]
        k_s, m_s = _alternate(calls, slices)
        row(f"single {method} [keyed] (ops/s)", "ops/s", len(source) / k_s, len(source) / m_s)

    rounds = [items[i::BULK_ROUNDS] for i in range(BULK_ROUNDS)]
    k_s, m_s = _alternate([keyed.hasher.item_digests, legacy.hasher.item_digests], rounds)
    per_item = 1e6 / len(items)
    row("hashing per item, bulk [keyed] (us)", "us", k_s * per_item, m_s * per_item, False)

    ones = [[x] for x in probes[:single]]
    calls = [lambda g, h=h: h._digest_one(g[0]) for h in (keyed, legacy)]
    k_s, m_s = _alternate(calls, ones)
    row("hashing per single op [keyed] (us)", "us", k_s / single * 1e6, m_s / single * 1e6, False)
    keyed.delete()
    legacy.delete()
