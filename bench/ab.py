"""Same-run A/B of the single-item hot path: two checkouts of django-bloom, alternated.

    python -m bench.ab OLD_CHECKOUT NEW_CHECKOUT [--rounds 20] [--n 10000] [--kind standard]
                                                 [--aio]

Each round runs one child process per checkout (order alternating) against one
private redis-server; a child times ``n`` single ``add`` then ``n`` single
``contains`` (wall clock and the client's CPU time). Prints medians, bests and
new/old ratios. For a change to the hot path, e.g. OLD_CHECKOUT from
``git archive <base> | tar -x -C /tmp/old``. ``--kind`` times another kind's hot path
(``family``: one member of a filter family; ``mirror``: a standard filter in
``MIRROR_FILTERS``, so ``contains`` reads the local copy; the others: that layout);
``--aio`` times ``aadd``/``acontains`` in one event loop (the asyncio transport) instead.
``--url`` uses a running Redis instead of starting one.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import statistics
import subprocess
import sys
import time
import uuid

OPS = ("add", "contains", "add_cpu", "contains_cpu")
KINDS = {
    "standard": {},
    "blocked": {"layout": "blocked"},
    "counting": {"layout": "counting"},
    "rotating": {"layout": "rotating"},
    "scalable": {"layout": "scalable"},
    "family": {"family": True, "member_ttl": 3600},
    "mirror": {},
}


def child(root: str, url: str, n: int, kind: str = "standard", aio: bool = False) -> dict:
    sys.path.insert(0, root)
    import django
    from django.conf import settings

    settings.configure(
        INSTALLED_APPS=["django.contrib.contenttypes", "django_bloom"],
        DATABASES={"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}},
        CACHES={"default": {"BACKEND": "django_redis.cache.RedisCache", "LOCATION": url}},
        DJANGO_BLOOM={
            "KEY_PREFIX": f"ab-{uuid.uuid4().hex[:8]}",
            "MIRROR_FILTERS": ["ab"] if kind == "mirror" else [],
            "SOCKET_TIMEOUT": 5.0,  # a busy machine: a slow reply is timed, not an error
        },
        USE_TZ=True,
    )
    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    import django_bloom

    assert django_bloom.__file__.startswith(root), django_bloom.__file__
    row = django_bloom.create_filter("ab", capacity=1_000_000, error_rate=0.01, **KINDS[kind])
    f = row.member(42) if kind == "family" else row
    items = [f"user-{i}@example.org" for i in range(n)]
    for item in items[:2000]:  # warm up
        f.add(item)
        f.contains(item)
    out = {}

    async def timed(call) -> None:
        for item in items:
            await call(item)

    for op, call in (("add", f.add), ("contains", f.contains)):
        wall, cpu = time.perf_counter(), time.process_time()
        if aio:
            asyncio.run(timed(getattr(f, f"a{op}")))
        else:
            for item in items:
                call(item)
        out[op] = (time.perf_counter() - wall) / n * 1e6
        out[f"{op}_cpu"] = (time.process_time() - cpu) / n * 1e6
    row.delete()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("old")
    parser.add_argument("new")
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--n", type=int, default=10_000)
    parser.add_argument("--kind", choices=sorted(KINDS), default="standard")
    parser.add_argument("--aio", action="store_true", help="time aadd/acontains (asyncio)")
    parser.add_argument("--url", default=None, help="a running Redis (default: start one)")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.old, args.child, args.n, args.kind, args.aio)))
        return
    server, url = None, args.url
    if url is None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        server = subprocess.Popen(
            ["redis-server", "--port", str(port), "--save", "", "--appendonly", "no"]
            + ["--maxmemory", "1gb"],
            stdout=subprocess.DEVNULL,
        )
        time.sleep(0.5)
        url = f"redis://127.0.0.1:{port}/0"
    results: dict[str, dict[str, list[float]]] = {
        side: {op: [] for op in OPS} for side in ("old", "new")
    }
    try:
        for r in range(args.rounds):
            order = [("old", args.old), ("new", args.new)]
            for side, root in order if r % 2 == 0 else order[::-1]:
                command = [sys.executable, "-m", "bench.ab", root, "x", "--n", str(args.n)]
                command += ["--kind", args.kind, *(["--aio"] if args.aio else [])]
                done = subprocess.run([*command, "--child", url], capture_output=True, text=True)
                if done.returncode:
                    raise SystemExit(f"{side} child failed:\n{done.stderr[-3000:]}")
                for op, value in json.loads(done.stdout).items():
                    results[side][op].append(value)
    finally:
        if server is not None:
            server.terminate()
            server.wait()
    for op in OPS:
        old, new = results["old"][op], results["new"][op]
        ratios = [b / a for a, b in zip(old, new, strict=True)]
        print(
            f"{op:12s} median old {statistics.median(old):6.1f} us new "
            f"{statistics.median(new):6.1f} us | best old {min(old):6.1f} new {min(new):6.1f} "
            f"ratio {min(new) / min(old):.3f} | median per-round ratio "
            f"{statistics.median(ratios):.3f}"
        )


if __name__ == "__main__":
    main()
