"""Filter families: a member's single add/contains against a plain filter's, same run.

A family member runs one script (control-key check, create on first write, TTL
refresh) where a plain filter sends one BITFIELD. Slices of 250 operations
alternate between a plain filter and one member of a family of the same size;
the median slice of each is kept. ``vs_plain`` < 1 means the member is slower.
"""

from __future__ import annotations

from bench.keyed import SLICE, _slices, alternate


def measure(create_filter, get_filter, items, probes, single, record, results) -> None:
    plain = create_filter("bench-plain", capacity=len(items), error_rate=0.01)
    create_filter(
        "bench-family", capacity=len(items), error_rate=0.01, family=True, member_ttl=3600
    )
    member = get_filter("bench-family", member=42)
    for handle in (plain, member):  # warm-up (and the member's key, and the script)
        for i in range(200):
            handle.add(f"warm{i}")
            handle.contains(f"warm{i}")

    for method, source in (("add", items[:single]), ("contains", probes[:single])):
        methods = [getattr(h, method) for h in (member, plain)]
        calls = [lambda g, f=f: [f(x) for x in g] for f in methods]
        member_s, plain_s = alternate(calls, _slices(source, SLICE))
        name = f"single {method} [family member] (ops/s)"
        record(name, "ops/s", SLICE / member_s, None, None)
        results[name].update(plain=SLICE / plain_s, vs_plain=plain_s / member_s)

    from django_bloom.services import get_family

    get_family("bench-family").delete()
    plain.delete()
