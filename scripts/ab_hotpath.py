"""Alternating A/B of single add/contains: this checkout against another one.

    ./scripts/with-redis.sh .venv/bin/python scripts/ab_hotpath.py OTHER_TREE [--rounds 10]
    ./scripts/with-redis.sh .venv/bin/python scripts/ab_hotpath.py --breaker [--rounds 10]

OTHER_TREE holds another version's ``django_bloom`` package (e.g. from
``git archive BASE django_bloom | tar -x -C /tmp/base``). Each round runs one
process per version, alternating, each timing OPS single contains and OPS
single adds on a warm filter; the report gives medians per operation and the
ratio this/other. ``--breaker`` compares, in one process and on the same
connection, this checkout with and without the circuit breaker around
``Storage._send`` (blocks alternate).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

CHILD = r"""
import json, os, sys, time, uuid
sys.path.insert(0, os.environ["AB_TREE"])
sys.path.insert(1, os.environ["AB_ROOT"])
os.environ["DJANGO_SETTINGS_MODULE"] = "tests.settings"
import django
django.setup()
from django.conf import settings
from django.core.management import call_command
call_command("migrate", verbosity=0)
import django_bloom
assert django_bloom.__file__.startswith(os.environ["AB_TREE"]), django_bloom.__file__
prefix = "ab-" + uuid.uuid4().hex[:8]
settings.DJANGO_BLOOM = {"KEY_PREFIX": prefix}
f = django_bloom.create_filter("ab", capacity=1_000_000)
ops = int(os.environ["AB_OPS"])
items = [f"item-{i}" for i in range(ops)]
for item in items[:2000]:  # warm up
    f.add(item); f.contains(item)


def measure():
    out = {}
    for name, call in (("contains", f.contains), ("add", f.add)):
        start = time.perf_counter_ns()
        for item in items:
            call(item)
        out[name] = (time.perf_counter_ns() - start) / ops / 1000
    return out


if os.environ.get("AB_BREAKER"):
    from django_bloom.storage import Storage
    guarded = Storage._send
    variants = {"this": guarded, "other": guarded.__wrapped__}
    out = {"this": [], "other": []}
    for block in range(int(os.environ["AB_ROUNDS"])):
        for which in (("this", "other") if block % 2 == 0 else ("other", "this")):
            Storage._send = variants[which]
            out[which].append(measure())
    Storage._send = guarded
else:
    out = measure()
f.delete()
print(json.dumps(out))
"""


def run(tree: Path, ops: int, **extra: str) -> Any:
    env = {**os.environ, "AB_TREE": str(tree), "AB_ROOT": str(ROOT), "AB_OPS": str(ops), **extra}
    done = subprocess.run(
        [sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, check=True
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("other", type=Path, nargs="?", help="a tree holding another django_bloom")
    parser.add_argument("--breaker", action="store_true", help="with vs without the breaker")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--ops", type=int, default=20_000)
    args = parser.parse_args()
    results: dict[str, dict[str, list[float]]] = {
        k: {"contains": [], "add": []} for k in ("this", "other")
    }
    if args.breaker:
        blocks = run(ROOT, args.ops, AB_BREAKER="1", AB_ROUNDS=str(args.rounds))
        for which, measured in blocks.items():
            for one in measured:
                for op, us in one.items():
                    results[which][op].append(us)
        print("this = with the circuit breaker, other = Storage._send without it")
    else:
        if args.other is None:
            parser.error("give OTHER_TREE or --breaker")
        trees = {"this": ROOT, "other": args.other.resolve()}
        for round_ in range(args.rounds):
            order = ["this", "other"] if round_ % 2 == 0 else ["other", "this"]
            for which in order:
                for op, us in run(trees[which], args.ops).items():
                    results[which][op].append(us)
    for op in ("contains", "add"):
        this = statistics.median(results["this"][op])
        other = statistics.median(results["other"][op])
        print(
            f"{op:8} this {this:6.1f} us  other {other:6.1f} us  "
            f"ratio this/other {this / other:.3f}  ({args.rounds} rounds x {args.ops} ops)"
        )


if __name__ == "__main__":
    main()
