"""Requests/s for unknown usernames on the example site, with and without the guard.

    python -m bench.guard_load [--requests 3000] [--threads 4] [--cap 30]

127.0.0.1 only, bounded by a request count and a time cap. Like bench/load.py:
a private redis-server and ``manage.py runserver --noreload`` on free ports,
SQLite seeded with 300 users (``seed_demo``, which fills the ``usernames``
filter). Drives ``GET /u/<random unknown name>/`` (every answer a 404) with the
profile view's ``@bloom_guard`` on (404 from the filter, no query) and off
(404 from the database). Stops what it started, by PID.
"""

from __future__ import annotations

import argparse
import http.client
import statistics
import subprocess
import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

from bench.load import SITE, STARTED, free_port, seeded_site, stop, wait_port


def drive(port: int, count: int, threads: int, cap: float) -> tuple[float, float, int]:
    """(requests/s, p50 ms, answers that were not 404) for ``count`` unknown names."""
    deadline = time.monotonic() + cap
    latencies: list[float] = []
    wrong = 0

    def one(i: int) -> None:
        nonlocal wrong
        if time.monotonic() > deadline:
            return
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        start = time.perf_counter()
        conn.request("GET", f"/u/nobody-{uuid.uuid4().hex[:12]}/")
        response = conn.getresponse()
        response.read()
        conn.close()
        latencies.append(time.perf_counter() - start)
        wrong += response.status != 404

    started = time.monotonic()
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(one, range(count)))
    seconds = time.monotonic() - started
    return len(latencies) / seconds, statistics.median(latencies) * 1000, wrong


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=3000)
    ap.add_argument("--threads", type=int, default=4)
    ap.add_argument("--cap", type=float, default=30.0)
    args = ap.parse_args(argv)
    rows = []
    with seeded_site("bench.guard_settings") as (env, _redis):
        env["LOAD_MIDDLEWARE"] = "0"
        for label, off in (("guard on", "0"), ("guard off", "1"), ("guard on (again)", "0")):
            port = free_port()
            server = subprocess.Popen(
                [sys.executable, "manage.py", "runserver", f"127.0.0.1:{port}", "--noreload"],
                cwd=SITE,
                env={**env, "GUARD_OFF": off},
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            STARTED.append(f"runserver pid {server.pid}")
            try:
                wait_port(port, server)
                drive(port, 100, args.threads, args.cap)  # warm-up
                rows.append((label, *drive(port, args.requests, args.threads, args.cap)))
            finally:
                stop(server)
    print("| profile view | req/s (unknown usernames) | p50 ms | answers not 404 |")
    print("|---|---|---|---|")
    for label, rate, p50, wrong in rows:
        print(f"| {label} | {rate:,.0f} | {p50:.1f} | {wrong} |")
    print(f"\n{args.threads} client threads; started and stopped: {', '.join(STARTED)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
