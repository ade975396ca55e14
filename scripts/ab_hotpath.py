"""Alternating A/B of single add/contains in one process, on one warm filter.

    ./scripts/with-redis.sh .venv/bin/python scripts/ab_hotpath.py --breaker
    ./scripts/with-redis.sh .venv/bin/python scripts/ab_hotpath.py --storage OTHER/storage.py

``--breaker``: ``EngineConnection.send`` with the circuit breaker around it (this) against
the same method without it (other). ``--storage``: this checkout's ``Storage``
against the ``Storage`` class of another version's storage.py (e.g. from
``git show BASE:django_bloom/storage.py > /tmp/base_storage.py``), loaded beside
it. Blocks of OPS operations alternate (ABBA), ROUNDS times; the report gives
medians per operation, wall time and this process's CPU time (steadier on a
shared machine: it leaves out waiting for Redis and for other processes).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def setup():
    sys.path.insert(0, str(ROOT))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")
    import django

    django.setup()
    from django.conf import settings
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    settings.DJANGO_BLOOM = {"KEY_PREFIX": "ab-" + uuid.uuid4().hex[:8]}
    import django_bloom

    return django_bloom.create_filter("ab", capacity=1_000_000)


def load_storage(path: Path):
    spec = importlib.util.spec_from_file_location("other_storage", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["other_storage"] = module
    spec.loader.exec_module(module)
    return module


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--breaker", action="store_true", help="with vs without the breaker")
    which.add_argument("--storage", type=Path, help="another version's storage.py")
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--ops", type=int, default=2000)
    args = parser.parse_args()
    f = setup()
    from django_bloom.engine.transport.connections import EngineConnection

    variants: dict[str, Callable[[], None]]
    if args.breaker:
        guarded = EngineConnection.send

        def use_send(method):
            return lambda: setattr(EngineConnection, "send", method)

        variants = {"this": use_send(guarded), "other": use_send(guarded.__wrapped__)}
        label = "this = EngineConnection.send with the circuit breaker, other = without it"
    else:
        ours, theirs = f.storage, load_storage(args.storage).Storage(f.storage.alias)
        variants = {
            "this": lambda: setattr(f, "storage", ours),
            "other": lambda: setattr(f, "storage", theirs),
        }
        label = f"this = this checkout's Storage, other = {args.storage}"
    items = [f"item-{i}" for i in range(args.ops)]
    for switch in variants.values():  # warm up both
        switch()
        for item in items:
            f.add(item)
            f.contains(item)
    clocks = {"wall": time.perf_counter_ns, "cpu": time.process_time_ns}
    results = {(v, op, c): [] for v in variants for op in ("contains", "add") for c in clocks}
    for round_ in range(args.rounds):
        order = ("this", "other") if round_ % 2 == 0 else ("other", "this")
        for name in order:
            variants[name]()
            for op in ("contains", "add"):
                call = getattr(f, op)
                start = {c: clock() for c, clock in clocks.items()}
                for item in items:
                    call(item)
                for c, clock in clocks.items():
                    results[name, op, c].append((clock() - start[c]) / args.ops / 1000)
    variants["this"]()
    f.delete()
    print(label)
    for op in ("contains", "add"):
        for c in clocks:
            this = statistics.median(results["this", op, c])
            other = statistics.median(results["other", op, c])
            print(
                f"{op:8} {c:4}  this {this:6.2f} us  other {other:6.2f} us  "
                f"ratio {this / other:.3f}  ({args.rounds} blocks x {args.ops} ops each)"
            )


if __name__ == "__main__":
    main()
