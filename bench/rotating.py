"""Rotating windows vs the standard layout: add/contains rates, same run, alternating.

    python -m bench.rotating [--n 100000] [--rounds 7] [--single 2000] [--batch-size 1000]

Starts a private redis-server (no persistence) on a free port, creates three
filters of the same per-slice size -- ``standard``, ``rotating`` with one live
slice (a fresh window), and ``rotating`` with all W + 1 = 25 live slices (the
current slice copied under the 24 older epochs' names: a full window, where an
absent item is looked up in every slice) -- and alternates the workloads
between them round after round, keeping each one's median. Prints rates and
the ratio to the standard layout measured in the same run (the anchor): the
machine is shared and noisy, ratios are what count.
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_redis() -> tuple[subprocess.Popen, str, str]:
    port, workdir = free_port(), tempfile.mkdtemp(prefix="bench-rotating-")
    proc = subprocess.Popen(
        ["redis-server", "--port", str(port), "--save", "", "--appendonly", "no",
         "--dir", workdir],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5) as sock:
                sock.sendall(b"PING\r\n")
                if sock.recv(16).startswith(b"+PONG"):
                    return proc, f"redis://127.0.0.1:{port}/0", workdir
        except OSError:
            time.sleep(0.05)
    proc.kill()
    raise SystemExit("redis-server did not start")


def setup_django(url: str) -> None:
    os.environ["BENCH_REDIS_URL"] = url
    os.environ["BENCH_PREFIX"] = f"bench-rot-{uuid.uuid4().hex[:6]}"
    os.environ["DJANGO_SETTINGS_MODULE"] = "bench.settings"
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    from django_bloom import counters

    # The in-memory SQLite database exists on this thread's connection only: the
    # background items_added flusher would find no table. The bench needs no counts.
    counters.FLUSH_SECONDS = 1e9
    from django.conf import settings
    from django.test.utils import override_settings

    # Throughput, not stall detection: on a loaded machine a full window's 1000-item batch
    # can take Redis longer than the 0.2 s default read timeout (see docs/rotating.md).
    override_settings(DJANGO_BLOOM={**settings.DJANGO_BLOOM, "SOCKET_TIMEOUT": 2.0}).enable()


def fill_window(handle) -> int:
    """Copy the current slice under the names of the W older epochs (and record them in
    the control key, as the script does when it creates a slice): every slice live."""
    from django_redis import get_redis_connection

    client = get_redis_connection("default")
    window = handle.layout.window
    (key,) = list(client.scan_iter(match=window.slice_pattern))
    epoch = int(key.rsplit(b":", 1)[1])
    slots = window.slices + 2  # the control key's record of created slices (rotating_ops)
    for older in range(epoch - window.slices, epoch):
        client.copy(key, window.slice_key(older), replace=True)
        client.setrange(window.control_key, 16 + 4 * (older % slots), older.to_bytes(4, "big"))
    return window.slices + 1


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.rotating")
    ap.add_argument("--n", type=int, default=100_000, help="capacity per slice; items loaded")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--single", type=int, default=2000, help="single operations per round")
    ap.add_argument("--batch-size", type=int, default=1000)
    ap.add_argument("--batches", type=int, default=10, help="batches per round")
    args = ap.parse_args(argv)
    if not shutil.which("redis-server"):
        raise SystemExit("redis-server is not on PATH")
    proc, url, workdir = start_redis()
    try:
        setup_django(url)
        return run(args)
    finally:
        proc.kill()
        proc.wait()
        shutil.rmtree(workdir, ignore_errors=True)


def run(args) -> int:
    import django_bloom

    n = args.n
    items = [f"user-{i}@example.org" for i in range(n)]
    variants = {
        "standard": django_bloom.create_filter("b-standard", capacity=n, error_rate=0.01),
    }
    for name, label in (("b-rot1", "rotating, 1 live slice"), ("b-rot25", "rotating, 25 live")):
        variants[label] = django_bloom.create_filter(
            name, capacity=n, error_rate=0.01, layout="rotating",
            options={"slices": 24, "slice_seconds": 3600},
        )  # fmt: skip
    for handle in variants.values():
        for start in range(0, n // 2, 10_000):
            handle.add_many(items[start : start + 10_000])  # half full: present/absent mix
    live = fill_window(variants["rotating, 25 live"])
    present, absent = items[: n // 2], [f"stranger-{i}" for i in range(n)]  # never added
    fresh = items[n // 2 :]  # what the adds write

    size, single = args.batch_size, args.single
    workloads = {
        "single add (ops/s)": (single, lambda h, r: [h.add(x) for x in _cut(fresh, r, single)]),
        "single contains, present (ops/s)": (
            single, lambda h, r: [h.contains(x) for x in _cut(present, r, single)]),
        "single contains, absent (ops/s)": (
            single, lambda h, r: [h.contains(x) for x in _cut(absent, r, single)]),
        f"batch add x{size} (items/s)": (
            size * args.batches,
            lambda h, r: [h.add_many(b) for b in _batches(fresh, r + 1, size, args.batches)]),
        f"batch contains x{size}, absent (items/s)": (
            size * args.batches,
            lambda h, r: [h.contains_many(b) for b in _batches(absent, r, size, args.batches)]),
    }  # fmt: skip
    spent: dict[tuple[str, str], list[float]] = {}
    for r in range(args.rounds):
        for work, (_count, fn) in workloads.items():
            order = list(variants.items())
            if r % 2:
                order.reverse()
            for label, handle in order:
                start = time.perf_counter()
                fn(handle, r)
                spent.setdefault((work, label), []).append(time.perf_counter() - start)

    print(f"n={n:,} per slice, p=0.01, W=24 ({live} live slices in the full window), "
          f"{args.rounds} rounds, medians; ratio = rate / standard's rate, same run")  # fmt: skip
    labels = list(variants)
    print(f"{'workload':44} " + " ".join(f"{label:>24}" for label in labels))
    for work, (count, _fn) in workloads.items():
        rates = [count / statistics.median(spent[(work, label)]) for label in labels]
        cells = [f"{rates[0]:>24,.0f}"] + [
            f"{rate:>13,.0f} ({rate / rates[0]:.2f}x)".rjust(24) for rate in rates[1:]
        ]
        print(f"{work:44} " + " ".join(cells))
    return 0


def _cut(items, r, count):
    start = (r * count) % max(1, len(items) - count)
    return items[start : start + count]


def _batches(items, r, size, batches):
    block = _cut(items, r, size * batches)
    return [block[i : i + size] for i in range(0, len(block), size)]


if __name__ == "__main__":
    sys.exit(main())
