"""Same-run A/B of batches: two checkouts, each as a ratio to RedisBloom in the same run.

    python -m bench.batch_ab OLD_CHECKOUT NEW_CHECKOUT [--rounds 6] [--batches 40]
        [--stream N]   # the new side's BATCH_STREAM_ITEMS (a checkout that knows it)

One private redis-server with RedisBloom (bench/anchor.py) for the whole run.
Each round runs one child process per checkout, alternating their order; a
child times ``--batches`` batches of 1,000 for each workload (standard and
blocked layout, contains_many and add_many), each batch followed by the same
items through ``BF.MEXISTS`` / ``BF.MADD``, and reports ours / RedisBloom's
time. Prints the median ratio per side and workload. On a shared machine the
result depends on the load: compare sides of one run only.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
import uuid

WORKLOADS = ("standard contains", "standard add", "blocked contains", "blocked add")
BATCH = 1000


def child(root: str, url: str, batches: int, stream: int | None) -> dict[str, float]:
    sys.path.insert(0, root)
    import django
    from django.conf import settings

    # A loaded machine can stall a batch past the 0.2 s default: time it, do not fail it.
    config: dict = {"KEY_PREFIX": f"batch-ab-{uuid.uuid4().hex[:8]}", "SOCKET_TIMEOUT": 5.0}
    if stream is not None:
        config["BATCH_STREAM_ITEMS"] = stream
    settings.configure(
        INSTALLED_APPS=["django.contrib.contenttypes", "django_bloom"],
        DATABASES={"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}},
        CACHES={"default": {"BACKEND": "django_redis.cache.RedisCache", "LOCATION": url}},
        DJANGO_BLOOM=config,
        USE_TZ=True,
    )
    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    from django_redis import get_redis_connection

    import django_bloom

    assert django_bloom.__file__.startswith(root), django_bloom.__file__
    r = get_redis_connection("default")
    items = [f"user{i}@example.com" for i in range(batches * BATCH)]
    probes = [f"probe{i}@example.org" for i in range(batches * BATCH)]
    out = {}
    for layout in ("standard", "blocked"):
        f = django_bloom.create_filter(
            f"ab-{layout}", capacity=1_000_000, error_rate=0.01, layout=layout
        )
        anchor = f"bf:{uuid.uuid4().hex[:8]}"
        r.execute_command("BF.RESERVE", anchor, 0.01, 1_000_000)
        for _ in range(10):  # warm up both
            f.add_many(items[:BATCH])
            f.contains_many(probes[:BATCH])
            r.execute_command("BF.MADD", anchor, *items[:BATCH])
            r.execute_command("BF.MEXISTS", anchor, *probes[:BATCH])
        for op, ours, command, data in (
            ("contains", f.contains_many, "BF.MEXISTS", probes),
            ("add", f.add_many, "BF.MADD", items),
        ):
            ours_s = theirs_s = 0.0
            for i in range(batches):
                group = data[i * BATCH : (i + 1) * BATCH]
                start = time.perf_counter()
                ours(group)
                ours_s += time.perf_counter() - start
                start = time.perf_counter()
                r.execute_command(command, anchor, *group)
                theirs_s += time.perf_counter() - start
            out[f"{layout} {op}"] = theirs_s / ours_s
        f.delete()
        r.delete(anchor)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("old")
    parser.add_argument("new")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--batches", type=int, default=40)
    parser.add_argument("--stream", type=int, default=None)
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.old, args.child, args.batches, args.stream)))
        return 0
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from bench.anchor import AnchorServer, module_path

    module = module_path()
    if module is None:
        print("RedisBloom not available: pip install -e '.[bench]'", file=sys.stderr)
        return 2
    results: dict[str, dict[str, list[float]]] = {
        side: {w: [] for w in WORKLOADS} for side in ("old", "new")
    }
    with AnchorServer(module) as url:
        for r in range(args.rounds):
            sides = [("old", args.old, None), ("new", args.new, args.stream)]
            for side, root, stream in sides if r % 2 == 0 else sides[::-1]:
                command = [sys.executable, "-m", "bench.batch_ab", root, "x"]
                command += ["--batches", str(args.batches), "--child", url]
                if stream is not None:
                    command += ["--stream", str(stream)]
                done = subprocess.run(command, capture_output=True, text=True)
                if done.returncode:
                    print(done.stderr, file=sys.stderr)
                    return 1
                for workload, ratio in json.loads(done.stdout.splitlines()[-1]).items():
                    results[side][workload].append(ratio)
    print(f"{'ours / RedisBloom (median)':28s}" + "".join(f"{w:>20s}" for w in WORKLOADS))
    for side in ("old", "new"):
        row = "".join(f"{statistics.median(results[side][w]):>19.3f}x" for w in WORKLOADS)
        print(f"{side:28s}{row}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
