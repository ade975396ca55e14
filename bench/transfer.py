"""Export and import (issue 37) against RedisBloom's BF.SCANDUMP / BF.LOADCHUNK, same server,
same run: throughput and client memory.

    python -m bench.transfer [--n 100000000] [--p 0.01] [--rounds 3] [--gib]

One private redis-server with RedisBloom loaded (``maxmemory`` 1 GB, 3 GB with ``--gib``,
``noeviction``). Two filters of ``--n`` items at ``--p`` (~120 MB each at 100M / 1%), their
bits made random (as full as a filter gets; the same bytes for every round):

- ours: a ``standard`` filter. Export: ``Filter.dump()`` written to a file. Import:
  ``load_filter`` of that file into the same filter: the whole atomic replacement (build
  key, checksums verified, journal replayed, swap).
- the anchor: a ``BF.RESERVE ... NONSCALING`` key through redis-py, as its docs show it.
  Export: the ``BF.SCANDUMP`` loop, each (iterator, chunk) written to a file. Import: the
  ``BF.LOADCHUNK`` loop into a fresh key, then ``RENAME`` over the live one (atomic as
  ours; a bare LOADCHUNK cannot load into a key that exists).

Every case runs in a child process of its own, in alternating order each round; the child
resets the kernel's high-water mark just before the work and reports the peak above what
it held then (``peak``) and its whole peak RSS (``process``: Python, Django, redis-py).
Throughput = filter bytes / wall seconds; ratio = ours / the anchor's (>= 1: ours faster).
``--gib``: also exports and imports a 1 GiB filter (``sharded``: 3 segments), ours only.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import struct
import subprocess
import sys
import tempfile
import time
import uuid

from bench.batches_memory import reset_peak, rss_kib

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FRAME = struct.Struct(">QI")  # the anchor's file: iterator, length, chunk


def django_setup(url: str, prefix: str) -> None:
    os.environ["BENCH_REDIS_URL"], os.environ["BENCH_PREFIX"] = url, prefix
    os.environ["DJANGO_SETTINGS_MODULE"] = "bench.settings"
    import django

    django.setup()
    from django.conf import settings

    settings.DJANGO_BLOOM = {**settings.DJANGO_BLOOM, "SOCKET_TIMEOUT": 10.0}
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    from django_bloom import counters

    counters.FLUSH_SECONDS = 24 * 3600.0


def prepare(url: str, prefix: str, n: int, p: float, gib: bool, path: str) -> dict:
    """The filters, their bits random; their rows saved to ``path`` (children re-create them
    in their own in-memory database)."""
    django_setup(url, prefix)
    import redis

    import django_bloom

    r = redis.Redis.from_url(url)
    rows = {}
    sizes = {"ours": (n, {})}
    if gib:
        sizes["gib"] = (900_000_000, {"layout": "sharded", "options": {"segments": 3}})
    for name, (capacity, kind) in sizes.items():
        f = django_bloom.create_filter(name, capacity=capacity, error_rate=p, **kind)
        for segment in f.layout.segments:
            for start in range(0, segment.num_bytes, 8 << 20):
                size = min(8 << 20, segment.num_bytes - start)
                r.setrange(segment.keys.bits, start, os.urandom(size))
        rows[name] = {
            field: getattr(f.meta, field)
            for field in ("capacity", "error_rate", "num_bits", "num_hashes", "seed", "hasher",
                          "layout", "options", "generation")
        }  # fmt: skip
    r.execute_command("BF.RESERVE", "bf:live", p, n, "NONSCALING")
    chunks, cursor = [], 0
    while True:
        cursor, data = r.execute_command("BF.SCANDUMP", "bf:live", cursor)
        if not cursor:
            break
        chunks.append((cursor, data if len(chunks) == 0 else os.urandom(len(data))))
    r.delete("bf:live")
    for cursor, data in chunks:
        r.execute_command("BF.LOADCHUNK", "bf:live", cursor, data)
    rows["anchor_bytes"] = sum(len(d) for _, d in chunks[1:])
    with open(path, "w") as out:
        json.dump(rows, out)
    return rows


def child(case: str, url: str, prefix: str, rows_path: str, path: str) -> dict:
    rows = json.load(open(rows_path))
    if case.startswith(("ours", "gib")):
        django_setup(url, prefix)
        from django_bloom.loading import load_filter
        from django_bloom.models import BloomFilter
        from django_bloom.services import get_filter

        name = case.split("-")[0]
        BloomFilter.objects.create(name=name, **rows[name])
        before = rss_kib()
        reset_peak()
        started = time.perf_counter()
        if case.endswith("export"):
            f = get_filter(name)
            with open(path, "wb") as out:
                for piece in f.dump():
                    out.write(piece)
            moved = f.bitmap_bytes
        else:
            with open(path, "rb") as source:
                f = load_filter(name, source)
            moved = f.bitmap_bytes
    else:
        import redis

        r = redis.Redis.from_url(url)
        r.delete("bf:load")
        before = rss_kib()
        reset_peak()
        started = time.perf_counter()
        moved = 0
        if case == "anchor-export":
            with open(path, "wb") as out:
                cursor = 0
                while True:
                    cursor, data = r.execute_command("BF.SCANDUMP", "bf:live", cursor)
                    if not cursor:
                        break
                    out.write(FRAME.pack(cursor, len(data)))
                    out.write(data)
                    moved += len(data)
        else:
            with open(path, "rb") as source:
                while head := source.read(FRAME.size):
                    cursor, size = FRAME.unpack(head)
                    data = source.read(size)
                    r.execute_command("BF.LOADCHUNK", "bf:load", cursor, data)
                    moved += size
            r.rename("bf:load", "bf:live")
        moved = rows["anchor_bytes"] if moved else moved
    seconds = time.perf_counter() - started
    return {
        "seconds": seconds,
        "mb_per_s": moved / seconds / 1e6,
        "bytes": moved,
        "peak_mib": (rss_kib("VmHWM") - before) / 1024,
        "process_mib": rss_kib("VmHWM") / 1024,
    }


def run_child(*args: str) -> dict:
    env = {**os.environ, "PYTHONPATH": HERE}
    done = subprocess.run(
        [sys.executable, "-m", "bench.transfer", "--child", json.dumps(args)],
        cwd=HERE, env=env, capture_output=True, text=True,
    )  # fmt: skip
    if done.returncode:
        raise RuntimeError(done.stderr or done.stdout)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=100_000_000)
    ap.add_argument("--p", type=float, default=0.01)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--gib", action="store_true", help="also a 1 GiB filter (ours only)")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(*json.loads(args.child))))
        return 0
    from bench.anchor import AnchorServer, module_path

    module = module_path()
    if module is None:
        print("RedisBloom not available: pip install -e '.[bench]'", file=sys.stderr)
        return 2
    work = tempfile.mkdtemp(prefix="bloom-transfer-")
    prefix = f"xfer-{uuid.uuid4().hex[:6]}"
    with AnchorServer(module) as url:
        import redis

        r = redis.Redis.from_url(url)
        r.config_set("maxmemory", "3gb" if args.gib else "1gb")
        r.config_set("maxmemory-policy", "noeviction")
        rows_path = os.path.join(work, "rows.json")
        subprocess.run(
            [sys.executable, "-c", "import sys, bench.transfer as t; t.prepare(*sys.argv[1:3], "
             "int(sys.argv[3]), float(sys.argv[4]), sys.argv[5] == '1', sys.argv[6])",
             url, prefix, str(args.n), str(args.p), "1" if args.gib else "0", rows_path],
            cwd=HERE, check=True,
        )  # fmt: skip
        results: dict[str, list[dict]] = {}
        for round_ in range(args.rounds):
            for op in ("export", "import"):
                sides = ["ours", "anchor"] if round_ % 2 == 0 else ["anchor", "ours"]
                for side in sides:
                    case = f"{side}-{op}"
                    path = os.path.join(work, f"{side}.dump")
                    results.setdefault(case, []).append(
                        run_child(case, url, prefix, rows_path, path)
                    )
        if args.gib:
            for op in ("export", "import"):
                results[f"gib-{op}"] = [
                    run_child(f"gib-{op}", url, prefix, rows_path, os.path.join(work, "gib.dump"))
                ]
        used = r.info("memory")["used_memory_peak_human"]
    print(f"n = {args.n:,}, p = {args.p:g}, {args.rounds} rounds (medians); Redis peak {used}")
    print(f"{'case':16}{'MB/s':>9}{'seconds':>9}{'MB':>8}{'peak MiB':>10}{'process MiB':>13}")
    for case, runs in results.items():
        med = {k: statistics.median(run[k] for run in runs) for k in runs[0]}
        print(
            f"{case:16}{med['mb_per_s']:>9.0f}{med['seconds']:>9.2f}{med['bytes'] / 1e6:>8.0f}"
            f"{max(run['peak_mib'] for run in runs):>10.1f}"
            f"{max(run['process_mib'] for run in runs):>13.1f}"
        )
    for op in ("export", "import"):
        ours = statistics.median(run["mb_per_s"] for run in results[f"ours-{op}"])
        anchor = statistics.median(run["mb_per_s"] for run in results[f"anchor-{op}"])
        print(f"{op}: ours / BF.{'SCANDUMP' if op == 'export' else 'LOADCHUNK'} = "
              f"{ours / anchor:.2f}x (target >= 1.0x)")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
