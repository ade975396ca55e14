"""The blocklist middleware per request, against no middleware and django-blocklist, one run.

    python -m bench.blocklist_middleware [--requests 5000] [--rounds 10] [--db sqlite]
                                         [--netset PATH] [--url redis://...]

What a site pays per request for the check, as Django runs it: ``GET /`` through Django's
test client (the whole handler: request, middleware, a one-line view, response), from
unlisted public IPv4 addresses (``REMOTE_ADDR``; none in the list, checked exactly), with
the FireHOL level-1 list loaded (2,892 networks; ``../shared/data/firehol_level1.netset``
beside the project root unless ``--netset``) into django-bloom and into django-blocklist
(which matches exact addresses only: each network's first address, 2,892 rows).

Variants, each a worker process of its own (its own caches, mirror and connections, as a
site's workers), alternated: ``--rounds`` rounds, in each every variant (in an order that
rotates) runs a block of ``--requests / --rounds`` requests after 100 warm-up requests:

- ``none``: no middleware (the anchor);
- ``django-bloom``: ``BlocklistMiddleware`` as installed (the list's filter mirrored:
  ``BLOCKLIST_MIRROR``, no Redis round trip);
- ``django-bloom, no mirror``: ``BLOCKLIST_MIRROR=False`` (one Redis round trip, as before);
- ``django-blocklist``: its ``BlocklistMiddleware`` (a primary-key query per request).

Prints p50/p90/p99 and mean latency, what each adds over the anchor at p50 and the ratio,
and the Redis round trips and database queries per request (counted on 100 further
requests, untimed). ``--db postgresql`` uses the PG* variables (a database of its own: the
tables are created there; 127.0.0.1 unless PGHOST); the default is a SQLite file. Starts a
private redis-server unless ``--url``; stops what it started, by PID.
"""

from __future__ import annotations

import argparse
import bisect
import ipaddress
import json
import os
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NETSET = ROOT.parent / "shared" / "data" / "firehol_level1.netset"
VARIANTS = ("none", "django-bloom", "django-bloom, no mirror", "django-blocklist")
MIDDLEWARE = {
    "none": [],
    "django-bloom": ["django_bloom.middleware.BlocklistMiddleware"],
    "django-bloom, no mirror": ["django_bloom.middleware.BlocklistMiddleware"],
    "django-blocklist": ["django_blocklist.middleware.BlocklistMiddleware"],
}
WARM_UP = 100
COUNTED = 100


def configure(args, middleware: list[str], mirror: bool = True) -> None:
    import django
    from django.conf import settings

    if args.db == "postgresql":
        database = {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": os.environ.get("PGDATABASE", "postgres"),
            "USER": os.environ.get("PGUSER", "postgres"),
            "HOST": os.environ.get("PGHOST", "127.0.0.1"),
            "PORT": os.environ.get("PGPORT", "5432"),
            "PASSWORD": os.environ.get("PGPASSWORD", ""),
        }
    else:
        database = {"ENGINE": "django.db.backends.sqlite3", "NAME": f"{args.workdir}/bench.db"}
    settings.configure(
        DEBUG=False,  # django-blocklist lets everything through under DEBUG
        SECRET_KEY="bench",
        ALLOWED_HOSTS=["testserver"],
        USE_TZ=True,
        ROOT_URLCONF="bench.blocklist_urls",
        INSTALLED_APPS=["django.contrib.contenttypes", "django_bloom", "django_blocklist"],
        MIDDLEWARE=middleware,
        DATABASES={"default": database},
        CACHES={"default": {"BACKEND": "django_redis.cache.RedisCache", "LOCATION": args.url}},
        DJANGO_BLOOM={
            "KEY_PREFIX": args.prefix,
            "SOCKET_TIMEOUT": 5.0,  # a busy machine: a slow reply is timed, not an error
            "BLOCKLIST_MIRROR": mirror,
        },
        BLOCKLIST_CONFIG={},
        LOGGING_CONFIG=None,
    )
    django.setup()


def setup(args) -> None:
    """Create the tables, load both lists, write the addresses file."""
    configure(args, [])
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    from django_blocklist.models import BlockedIP

    from django_bloom import ipblock

    ipblock.import_netset(str(args.netset), reason="firehol")
    networks = [ipaddress.ip_network(n) for n in ipblock.iter_filter_items()]
    BlockedIP.objects.all().delete()
    BlockedIP.objects.bulk_create(
        [BlockedIP(ip=str(n.network_address), reason="firehol") for n in networks],
        batch_size=1000,
        ignore_conflicts=True,
    )
    spans = sorted((int(n.network_address), int(n.broadcast_address)) for n in networks)
    starts = [s for s, _ in spans]
    rng, addresses = random.Random(args.seed), []
    while len(addresses) < args.requests + WARM_UP + COUNTED:
        value = rng.randrange(1 << 24, 224 << 24)
        i = bisect.bisect_right(starts, value) - 1
        if (i < 0 or value > spans[i][1]) and ipaddress.IPv4Address(value).is_global:
            addresses.append(str(ipaddress.IPv4Address(value)))
    Path(args.workdir, "addresses.json").write_text(json.dumps(addresses))
    print(
        f"FireHOL level 1: {len(networks):,} networks in django-bloom, "
        f"{BlockedIP.objects.count():,} addresses in django-blocklist",
        file=sys.stderr,
    )


def worker(args) -> dict:
    """One variant's block: warm up, time ``--requests / --rounds`` requests, count costs."""
    configure(args, MIDDLEWARE[args.variant], mirror=args.variant != "django-bloom, no mirror")
    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext

    from django_bloom.engine.storage import Storage

    addresses = json.loads(Path(args.workdir, "addresses.json").read_text())
    block = args.requests // args.rounds
    timed_part = addresses[args.round * block : (args.round + 1) * block]
    rest = addresses[args.requests :]
    client = Client()
    for address in rest[:WARM_UP]:
        client.get("/", REMOTE_ADDR=address)
    times = []
    for address in timed_part:
        started = time.perf_counter()
        response = client.get("/", REMOTE_ADDR=address)
        times.append(time.perf_counter() - started)
        if response.status_code != 200:
            raise SystemExit(f"{address} answered {response.status_code}: the bench is wrong")
    sent, real = [], Storage._send

    def counted(self, *a, **kw):
        sent.append(1)
        return real(self, *a, **kw)

    Storage._send = counted
    with CaptureQueriesContext(connection) as queries:
        for address in rest[WARM_UP:]:
            client.get("/", REMOTE_ADDR=address)
    Storage._send = real
    return {"times": times, "trips": len(sent) / COUNTED, "queries": len(queries) / COUNTED}


def start_redis() -> tuple[subprocess.Popen, str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
         "--appendonly", "no", "--maxmemory", "256mb"],
        stdout=subprocess.DEVNULL,
    )  # fmt: skip
    deadline = time.monotonic() + 30
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return proc, f"redis://127.0.0.1:{port}/0"
        except OSError:
            if time.monotonic() > deadline:
                proc.kill()
                raise
            time.sleep(0.05)


def child(args, *extra: str) -> str:
    command = [sys.executable, "-m", "bench.blocklist_middleware", *extra]
    command += ["--requests", str(args.requests), "--rounds", str(args.rounds)]
    command += ["--db", args.db, "--netset", str(args.netset), "--seed", str(args.seed)]
    command += ["--url", args.url, "--workdir", args.workdir, "--prefix", args.prefix]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"{extra} failed:\n{done.stderr[-3000:]}")
    print(done.stderr, end="", file=sys.stderr)
    return done.stdout


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000


def report(args, results: dict) -> None:
    from importlib.metadata import version

    print(
        f"\n{args.requests:,} requests per variant ({args.rounds} alternating blocks, one "
        f"worker process per block), database {args.db}, Django's test client, unlisted "
        f"public IPv4 addresses; django-blocklist {version('django-blocklist')}\n"
    )
    anchor = pct(results["none"]["times"], 0.5)
    print("| variant | p50 ms | p90 ms | p99 ms | mean ms | added at p50 | x none "
          "| round trips | queries |")  # fmt: skip
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for variant in VARIANTS:
        t, r = results[variant]["times"], results[variant]
        p50 = pct(t, 0.5)
        print(
            f"| {variant} | {p50:.3f} | {pct(t, 0.9):.3f} | {pct(t, 0.99):.3f} | "
            f"{statistics.mean(t) * 1000:.3f} | {p50 - anchor:+.3f} ms | {p50 / anchor:.2f} | "
            f"{statistics.mean(r['trips']):.2f} | {statistics.mean(r['queries']):.2f} |"
        )


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=5000, help="per variant (5000)")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--db", choices=("sqlite", "postgresql"), default="sqlite")
    parser.add_argument("--netset", type=Path, default=NETSET)
    parser.add_argument("--url", default=None, help="a running Redis (default: start one)")
    parser.add_argument("--seed", type=int, default=38)
    for hidden in ("--workdir", "--prefix", "--variant", "--round", "--step"):
        parser.add_argument(hidden, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.step == "setup":
        return setup(args) or 0
    if args.step == "worker":
        args.round = int(args.round)
        print(json.dumps(worker(args)))
        return 0
    if not args.netset.exists():
        print(f"SKIPPED: {args.netset} is absent (../shared/data beside the project)")
        return 0
    server, args.url = (None, args.url) if args.url else start_redis()
    args.prefix = f"bench-mw-{os.getpid()}"
    try:
        with tempfile.TemporaryDirectory() as args.workdir:
            child(args, "--step", "setup")
            results = {v: {"times": [], "trips": [], "queries": []} for v in VARIANTS}
            for r in range(args.rounds):
                for variant in VARIANTS[r % 4 :] + VARIANTS[: r % 4]:
                    out = json.loads(child(args, "--step", "worker", "--variant", variant,
                                           "--round", str(r)))  # fmt: skip
                    results[variant]["times"] += out["times"]
                    results[variant]["trips"].append(out["trips"])
                    results[variant]["queries"].append(out["queries"])
            report(args, results)
    finally:
        if server is not None:
            server.terminate()
            server.wait()
            print(f"stopped redis-server pid {server.pid}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
