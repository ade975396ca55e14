"""The blocklist middleware under an ASGI server: 200 concurrent requests, old and new async path.

    python -m bench.asgi_middleware [--concurrency 200] [--rounds 10] [--blocked 500]
                                    [--redis-rtt-ms 0]

127.0.0.1 only. Starts a private redis-server and, per configuration, uvicorn
(one worker) serving bench/asgi_app.py (one async view) on free ports; a
temporary SQLite database holds ``--blocked`` blocked networks (/24s and single
addresses, so each check probes two candidates). Fires ``--rounds`` rounds of
``--concurrency`` concurrent ``GET /`` with httpx.AsyncClient, each from a
random public address in ``X-Forwarded-For`` (uvicorn's peer 127.0.0.1 is a
trusted proxy); one in 20 is blocked (a 403 is a completed request).
Configurations: no middleware (the anchor, measured first and last), the
former async path (``thread``: the check in ``sync_to_async(thread_sensitive=True)``,
one shared thread) and today's (``async``: the check awaited on the event loop).
Prints p50/p99 latency and requests/s, with ratios to the anchor measured in
the same run; then the same two middleware paths alone, in this process (no
HTTP), as 200 concurrent calls on one event loop. ``--redis-rtt-ms`` puts
Redis behind a delaying proxy (bench/latency_proxy.py), as a managed Redis a
network hop away. Stops what it started, by PID.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field

from bench.load import ROOT, STARTED, free_port, stop, wait_port

CONFIGS = ("off", "thread", "async", "off (again)")
# A server is fired at once it has answered one request: that first one pays for the
# imports and the database and Redis connections (seconds; far more on a busy machine).
READY_SECONDS = 180.0

SEED = """
import random
import django
django.setup()
from django.core.management import call_command
call_command("migrate", verbosity=0)
from django_bloom import ipblock as blocklist
rng = random.Random(1)
networks = ["192.0.2.0/24"]
networks += [f"{rng.randint(11, 99)}.{rng.randint(0, 254)}.{rng.randint(0, 254)}.0/24"
             for _ in range({count} // 2)]
networks += [f"{rng.randint(100, 199)}.{rng.randint(0, 254)}.{rng.randint(0, 254)}."
             f"{rng.randint(1, 254)}" for _ in range({count} // 2)]
blocklist.import_netset(networks)
print(blocklist.check_ip("192.0.2.9").blocked)
"""


@dataclass
class Result:
    label: str
    latencies: list[float] = field(default_factory=list)
    seconds: float = 0.0
    blocked: int = 0
    failed: int = 0
    reasons: dict[str, int] = field(default_factory=dict)

    def fail(self, reason: str) -> None:
        self.failed += 1
        self.reasons[reason] = self.reasons.get(reason, 0) + 1

    def pct(self, q: float) -> float:
        lat = sorted(self.latencies)
        return lat[min(len(lat) - 1, int(q * len(lat)))] * 1000

    @property
    def rate(self) -> float:
        return len(self.latencies) / self.seconds if self.seconds else 0.0


def addresses(count: int, rng: random.Random) -> list[str]:
    """One in 20 from 192.0.2.0/24 (blocked), the others random public addresses."""

    def octets():
        return (rng.randint(11, 99), rng.randint(0, 254), rng.randint(0, 254), rng.randint(1, 254))

    return [
        f"192.0.2.{rng.randint(1, 254)}" if i % 20 == 0 else ".".join(map(str, octets()))
        for i in range(count)
    ]


async def fire(port: int, label: str, concurrency: int, rounds: int, timeout: float) -> Result:
    import httpx

    result = Result(label)
    rng = random.Random(label)
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    base = f"http://127.0.0.1:{port}"
    async with httpx.AsyncClient(base_url=base, limits=limits, timeout=timeout) as client:

        async def one(address: str) -> None:
            start = time.perf_counter()
            try:
                response = await client.get("/", headers={"X-Forwarded-For": address})
            except httpx.HTTPError as exc:
                result.fail(type(exc).__name__)
                return
            if response.status_code in (200, 403):
                result.latencies.append(time.perf_counter() - start)
                result.blocked += response.status_code == 403
            else:
                result.fail(f"HTTP {response.status_code}")

        await asyncio.gather(*(one(a) for a in addresses(concurrency, rng)))  # warm-up
        result.latencies.clear()
        result.blocked = 0
        started = time.perf_counter()
        for _ in range(rounds):
            await asyncio.gather(*(one(a) for a in addresses(concurrency, rng)))
        result.seconds = time.perf_counter() - started
    return result


async def in_process(middleware_class, label: str, concurrency: int, rounds: int) -> Result:
    """``rounds`` x ``concurrency`` concurrent calls of the middleware alone on one loop."""
    from django.http import HttpResponse
    from django.test import RequestFactory

    async def view(request):
        return HttpResponse(b"ok")

    middleware = middleware_class(view)
    factory = RequestFactory()
    result = Result(label)
    rng = random.Random(label)

    async def one(address: str) -> None:
        request = factory.get("/", REMOTE_ADDR=address)
        start = time.perf_counter()
        response = await middleware(request)
        result.latencies.append(time.perf_counter() - start)
        result.blocked += response.status_code == 403

    await asyncio.gather(*(one(a) for a in addresses(concurrency, rng)))  # warm-up
    result.latencies.clear()
    result.blocked = 0
    started = time.perf_counter()
    for _ in range(rounds):
        await asyncio.gather(*(one(a) for a in addresses(concurrency, rng)))
    result.seconds = time.perf_counter() - started
    return result


def in_process_rows(env: dict, args) -> list[Result]:
    """The middleware alone (no HTTP, no server): the former thread path, then the async one."""
    os.environ.update({k: env[k] for k in ("REDIS_URL", "BENCH_DB", "DJANGO_SETTINGS_MODULE")})
    import django

    django.setup()
    from bench.asgi_urls import ThreadedBlocklistMiddleware
    from django_bloom.middleware import BlocklistMiddleware

    rows = []
    for label, cls in (("thread", ThreadedBlocklistMiddleware), ("async", BlocklistMiddleware)):
        rows.append(asyncio.run(in_process(cls, label, args.concurrency, args.rounds)))
    return rows


def serve(env: dict, middleware: str, log: str) -> tuple[subprocess.Popen, int]:
    port = free_port()
    with open(log, "ab") as errors:
        server = subprocess.Popen(
            [sys.executable, "-m", "uvicorn", "bench.asgi_app:application", "--host", "127.0.0.1",
             "--port", str(port), "--log-level", "warning", "--no-access-log", "--lifespan", "off",
             "--backlog", "4096", "--timeout-keep-alive", "120"],
            cwd=ROOT, env={**env, "BENCH_MIDDLEWARE": middleware},
            stdout=subprocess.DEVNULL, stderr=errors,
        )  # fmt: skip
    STARTED.append(f"uvicorn pid {server.pid}")
    try:
        wait_port(port, server)
        wait_answers(port, server)
    except RuntimeError:
        stop(server)
        with open(log) as errors:
            print(errors.read()[-3000:], file=sys.stderr)
        raise
    return server, port


def wait_answers(port: int, server: subprocess.Popen, seconds: float = READY_SECONDS) -> None:
    """Until ``GET /`` is answered (any status: a 403 or a 503 is an answer too)."""
    deadline = time.monotonic() + seconds
    while True:
        left = deadline - time.monotonic()
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=max(1.0, left)).close()
            return
        except urllib.error.HTTPError:
            return
        except OSError as exc:
            if server.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"127.0.0.1:{port} answered nothing in {seconds}s") from exc
            time.sleep(0.2)


def table(results: list[Result], anchor: Result) -> str:
    lines = [
        "| middleware | requests | req/s | vs no middleware | p50 ms | p99 ms | 403 | failed |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        lines.append(
            f"| {r.label} | {len(r.latencies)} | {r.rate:,.0f} | {r.rate / anchor.rate:.2f}x "
            f"| {r.pct(0.5):.1f} | {r.pct(0.99):.1f} | {r.blocked} | {r.failed} |"
        )
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.asgi_middleware", description=__doc__)
    ap.add_argument("--concurrency", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--blocked", type=int, default=500, help="blocked networks in the list")
    ap.add_argument("--timeout", type=float, default=30.0)
    ap.add_argument(
        "--redis-rtt-ms",
        type=float,
        default=0.0,
        help="put Redis this far away (bench/latency_proxy.py; 0: direct)",
    )
    args = ap.parse_args(argv)
    try:
        import httpx  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError:
        print("needs uvicorn and httpx: pip install -e '.[bench]'", file=sys.stderr)
        return 2
    results: list[Result] = []
    with tempfile.TemporaryDirectory(prefix="bloom-asgi-") as tmp:
        redis_port = free_port()
        redis = subprocess.Popen(
            ["redis-server", "--port", str(redis_port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", tmp, "--logfile", f"{tmp}/redis.log"],
        )  # fmt: skip
        STARTED.append(f"redis-server pid {redis.pid}")
        proxy = None
        try:
            wait_port(redis_port, redis)
            url_port = redis_port
            if args.redis_rtt_ms:
                url_port = free_port()
                proxy = subprocess.Popen(
                    [sys.executable, "-m", "bench.latency_proxy", str(url_port), str(redis_port),
                     str(args.redis_rtt_ms)],
                    cwd=ROOT,
                )  # fmt: skip
                STARTED.append(f"latency proxy pid {proxy.pid}")
                wait_port(url_port, proxy)
            env = {
                **os.environ,
                "REDIS_URL": f"redis://127.0.0.1:{url_port}/0",
                "BENCH_DB": f"{tmp}/site.sqlite3",
                "DJANGO_SETTINGS_MODULE": "bench.asgi_settings",
                "PYTHONPATH": str(ROOT),
            }
            seeded = subprocess.run(
                [sys.executable, "-c", SEED.replace("{count}", str(args.blocked))],
                cwd=ROOT, env=env, check=True, capture_output=True, text=True,
            )  # fmt: skip
            assert seeded.stdout.strip().endswith("True"), seeded.stdout + seeded.stderr
            inner = in_process_rows(env, args)
            for label in CONFIGS:
                server, port = serve(env, label.split()[0], f"{tmp}/uvicorn.log")
                try:
                    results.append(
                        asyncio.run(fire(port, label, args.concurrency, args.rounds, args.timeout))
                    )
                finally:
                    stop(server)
        finally:
            if proxy is not None:
                stop(proxy)
            stop(redis)
    anchor = Result("anchor", latencies=[0.0], seconds=0.0)
    offs = [r for r in results if r.label.startswith("off")]
    anchor.seconds = 1.0 / statistics.mean(r.rate for r in offs)  # mean of the two anchors
    print(
        f"{args.rounds} rounds of {args.concurrency} concurrent GET / under uvicorn (1 worker), "
        f"{args.blocked} blocked networks, Redis round trip +{args.redis_rtt_ms} ms; "
        "ratios to the mean of the two no-middleware runs"
    )
    print(table(results, anchor))
    print(
        f"\nThe middleware alone, in process: {args.rounds} rounds of {args.concurrency} "
        "concurrent calls on one event loop (async/thread ratio from the same run)"
    )
    print("| path | calls | calls/s | vs thread | p50 ms | p99 ms | 403 |")
    print("|---|---|---|---|---|---|---|")
    for r in inner:
        print(
            f"| {r.label} | {len(r.latencies)} | {r.rate:,.0f} | {r.rate / inner[0].rate:.2f}x "
            f"| {r.pct(0.5):.1f} | {r.pct(0.99):.1f} | {r.blocked} |"
        )
    for r in results:
        if r.failed:
            print(f"{r.label}: failed requests: {r.reasons}")
    print("started and stopped:", ", ".join(STARTED))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
