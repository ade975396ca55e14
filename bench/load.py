"""Bounded load test of the example site through the blocklist middleware (127.0.0.1 only).

    python -m bench.load [--requests 2000] [--threads 8] [--stalled 200] [--cap 30]

Starts a private redis-server and the example site (``manage.py runserver
--noreload``, threaded) on free ports of 127.0.0.1, seeds a temporary SQLite
database, and drives ``GET /`` with a fixed number of requests from a thread
pool, each from a random public address in ``X-Forwarded-For`` (the site
trusts 127.0.0.1 as a proxy) so the middleware checks every request; one in 20
is in the sample blocklist (a 403 is a completed request). Per
configuration: middleware off, on (remote: one Redis round trip per request),
on with the local mirror (``MIRROR_FILTERS``); then the same while Redis is
stalled (SIGSTOP of the private redis-server, SIGCONT after), paced at
``--rate`` requests/s so the phase outlasts the mirror's refresh. Every phase is
bounded by a request count and a time cap (``--cap`` seconds; ``--timeout``
per request). Prints a table and stops everything it started, by PID.
"""

from __future__ import annotations

import argparse
import http.client
import os
import random
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SITE = ROOT / "example_site"
CONFIGS = (
    ("off", {"LOAD_MIDDLEWARE": "0"}),
    ("on, remote", {}),
    ("on, mirror", {"LOAD_MIRROR": "1"}),
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port: int, proc: subprocess.Popen, seconds: float = 30.0) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"process {proc.pid} exited with {proc.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"nothing listens on 127.0.0.1:{port} after {seconds}s")


STARTED: list[str] = []  # "name pid N" of every process started, for the report


def stop(proc: subprocess.Popen) -> None:
    """Stop one process we started, by its PID (resumed first in case it is stopped)."""
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGCONT)
        os.kill(proc.pid, signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()


@dataclass
class Phase:
    label: str
    sent: int
    done: int
    blocked: int
    failed: int
    seconds: float
    latencies: list[float]

    def row(self) -> list[str]:
        lat = sorted(self.latencies)

        def pct(q: float) -> str:
            if not lat:
                return "-"
            return f"{lat[min(len(lat) - 1, int(q * len(lat)))] * 1000:.1f}"

        return [
            self.label,
            f"{self.done}/{self.sent}",
            f"{self.done / self.seconds:,.0f}" if self.seconds else "-",
            f"{statistics.median(lat) * 1000:.1f}" if lat else "-",
            pct(0.99),
            f"{lat[-1] * 1000:.0f}" if lat else "-",
            str(self.blocked),
            str(self.failed),
        ]


def drive(
    port: int, label: str, count: int, threads: int, cap: float, timeout: float, rate: float = 0
) -> Phase:
    """``count`` GETs of / from ``threads`` threads, ``rate`` a second at most (0: no limit);
    stops sending after ``cap`` seconds."""
    rng = random.Random(label)
    addresses = [  # one in 20 from the sample blocklist's 192.0.2.0/24: refused with 403
        f"192.0.2.{rng.randint(1, 254)}"
        if i % 20 == 0
        else ".".join(str(rng.randint(low, 254)) for low in (11, 0, 0, 1))
        for i in range(count)
    ]
    lock = threading.Lock()
    phase = Phase(label, 0, 0, 0, 0, 0.0, [])
    started = time.monotonic()
    deadline = started + cap

    def one(numbered: tuple[int, str]) -> None:
        i, address = numbered
        if rate:
            time.sleep(max(0.0, started + i / rate - time.monotonic()))
        if time.monotonic() > deadline:
            return
        with lock:
            phase.sent += 1
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
        start = time.perf_counter()
        try:
            conn.request("GET", "/", headers={"X-Forwarded-For": address})
            response = conn.getresponse()
            response.read()
            status = response.status
        except OSError:
            status = None
        finally:
            conn.close()
        spent = time.perf_counter() - start
        with lock:
            if status in (200, 403):
                phase.done += 1
                phase.blocked += status == 403
                phase.latencies.append(spent)
            else:
                phase.failed += 1

    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(one, enumerate(addresses)))
    phase.seconds = time.monotonic() - started
    return phase


def manage(env: dict, *args: str) -> None:
    subprocess.run(
        [sys.executable, "manage.py", *args], cwd=SITE, env=env, check=True, capture_output=True
    )


@contextmanager
def seeded_site(settings: str) -> Iterator[tuple[dict, subprocess.Popen]]:
    """(environment for manage.py, redis-server): a private Redis and a temporary SQLite
    database seeded with the demo (300 users); stopped and removed afterwards."""
    with tempfile.TemporaryDirectory(prefix="bloom-load-") as tmp:
        redis_port = free_port()
        redis = subprocess.Popen(
            ["redis-server", "--port", str(redis_port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", tmp, "--logfile", f"{tmp}/redis.log"],
        )  # fmt: skip
        STARTED.append(f"redis-server pid {redis.pid}")
        try:
            wait_port(redis_port, redis)
            env = {
                **os.environ,
                "REDIS_URL": f"redis://127.0.0.1:{redis_port}/0",
                "EXAMPLE_DB": f"{tmp}/site.sqlite3",
                "DJANGO_SETTINGS_MODULE": settings,
                "PYTHONPATH": os.pathsep.join([str(ROOT), str(SITE)]),
            }
            manage(env, "migrate", "--noinput")
            manage(env, "seed_demo", "--users", "300")
            yield env, redis
        finally:
            stop(redis)


def run(args) -> list[Phase]:
    phases: list[Phase] = []
    with seeded_site("bench.load_settings") as (env, redis):
        for label, extra in CONFIGS:
            phases += serve_and_drive(args, {**env, **extra}, label, redis)
    return phases


def serve_and_drive(args, env: dict, label: str, redis: subprocess.Popen) -> list[Phase]:
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "manage.py", "runserver", f"127.0.0.1:{port}", "--noreload"],
        cwd=SITE,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    STARTED.append(f"runserver pid {server.pid}")
    try:
        wait_port(port, server)
        drive(port, f"{label} warm-up", 100, args.threads, args.cap, args.timeout)
        out = [drive(port, label, args.requests, args.threads, args.cap, args.timeout)]
        os.kill(redis.pid, signal.SIGSTOP)
        try:
            stalled = f"{label}, Redis stalled"
            out.append(
                drive(port, stalled, args.stalled, args.threads, args.cap, args.timeout, args.rate)
            )
        finally:
            os.kill(redis.pid, signal.SIGCONT)
        return out
    finally:
        stop(server)


def table(phases: list[Phase]) -> str:
    rows = [["middleware", "done/sent", "req/s", "p50 ms", "p99 ms", "max ms", "403", "failed"]]
    rows += [p.row() for p in phases]
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join(
        "  ".join(
            c.ljust(w) if i == 0 else c.rjust(w)
            for i, (c, w) in enumerate(zip(r, widths, strict=True))
        )
        for r in rows
    )


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.load", description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=2000, help="requests per normal phase")
    ap.add_argument("--stalled", type=int, default=400, help="requests per stalled phase")
    ap.add_argument(
        "--rate",
        type=float,
        default=50.0,
        help="requests/s while stalled (400 at 50/s: 8 s, past the mirror's 5 s refresh)",
    )
    ap.add_argument("--threads", type=int, default=8)
    ap.add_argument("--cap", type=float, default=30.0, help="seconds a phase may send for")
    ap.add_argument("--timeout", type=float, default=10.0, help="client timeout per request")
    args = ap.parse_args(argv)
    phases = run(args)
    print(table(phases))
    print(
        f"\n{args.threads} client threads, GET / with a random public X-Forwarded-For; "
        "runserver --noreload (threaded), SQLite, a private redis-server."
    )
    print(f"started and stopped: {', '.join(STARTED)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
