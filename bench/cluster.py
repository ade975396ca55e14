"""Scale-out: one sharded filter on a 3-master Redis Cluster vs a 1-master cluster.

    python -m bench --cluster [--workers 4] [--seconds 4] [--rounds 2] [--batch-size 1000]
    python -m bench.cluster  (the same)

Starts, on free ports, a 1-master cluster (one node holding all 16384 slots)
and a 3-master cluster (``redis-cli --cluster create``), both reached through
``DJANGO_BLOOM["CLUSTERS"]`` (so both runs use the same engine path), and one
sharded filter (12 segments) on each. ``--workers`` client processes then run
batch ``add_many`` / ``contains_many`` of ``--batch-size`` items for
``--seconds`` each, against 1 master and 3 masters in alternating rounds of
the same run. Prints items/s and the ratio 3 masters / 1 master.

Two figures, because clients and servers share this machine's cores:

- measured: items/s seen by the clients (wall clock);
- server-bound: items / the busiest node's CPU seconds (``INFO cpu``, user +
  system, over the same interval): what the servers could sustain if the
  clients ran elsewhere, as they would in production. On a 2-core machine the measured
  ratio cannot exceed ~1: three servers and the clients share two cores.

Stops every server it started, by PID.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
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

SEGMENTS = 12
CAPACITY = 10_000_000
ERROR_RATE = 0.01


def parse_args(argv=None):
    ap = argparse.ArgumentParser(
        prog="python -m bench --cluster", description=__doc__.split("\n")[0]
    )
    ap.add_argument("--cluster", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--workers", type=int, default=4, help="client processes")
    ap.add_argument("--seconds", type=float, default=4.0, help="per workload and round")
    ap.add_argument("--rounds", type=int, default=2, help="alternating rounds of 1 and 3 masters")
    ap.add_argument("--batch-size", type=int, default=1000)
    ap.add_argument("--quick", action="store_true", help="tiny run for smoke tests")
    ap.add_argument("--out", default=str(HERE / "results" / "cluster.json"))
    args, _unknown = ap.parse_known_args(argv)
    if args.quick:
        args.workers, args.seconds, args.rounds = 2, 0.5, 1
    return args


# -- servers --------------------------------------------------------------------------
def _free_cluster_port() -> int:
    """A free port <= 55535 whose cluster bus port (+10000) is free too."""
    for _ in range(200):
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        if port > 55535:
            port = 20000 + port % 30000
        try:
            for candidate in (port, port + 10000):
                with socket.socket() as sock:
                    sock.bind(("127.0.0.1", candidate))
        except OSError:
            continue
        return port
    raise RuntimeError("no free port pair")


class Cluster:
    def __init__(self, directory: Path, masters: int):
        import redis

        self.processes: list[subprocess.Popen] = []
        self.ports: list[int] = []
        try:
            for _ in range(masters):
                port = _free_cluster_port()
                self.processes.append(
                    subprocess.Popen(
                        [
                            "redis-server",
                            "--port",
                            str(port),
                            "--bind",
                            "127.0.0.1",
                            "--save",
                            "",
                            "--appendonly",
                            "no",
                            "--dir",
                            str(directory),
                            "--cluster-enabled",
                            "yes",
                            "--cluster-config-file",
                            str(directory / f"nodes-{port}.conf"),
                            "--logfile",
                            str(directory / f"redis-{port}.log"),
                        ],
                    )  # fmt: skip
                )
                self.ports.append(port)
            for port in self.ports:
                self._wait(lambda p=port: redis.Redis(port=p).ping())
            if masters == 1:
                redis.Redis(port=self.ports[0]).execute_command(
                    "CLUSTER", "ADDSLOTSRANGE", 0, 16383
                )
            else:
                subprocess.run(
                    ["redis-cli", "--cluster", "create",
                     *(f"127.0.0.1:{p}" for p in self.ports),
                     "--cluster-replicas", "0", "--cluster-yes"],
                    check=True, capture_output=True, timeout=60,
                )  # fmt: skip
            for port in self.ports:
                self._wait(
                    lambda p=port: (
                        b"cluster_state:ok"
                        in redis.Redis(port=p).execute_command("CLUSTER", "INFO")
                    )
                )
        except BaseException:
            self.stop()
            raise

    @staticmethod
    def _wait(ready, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                if ready():
                    return
            except Exception:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("cluster did not come up")
            time.sleep(0.05)

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.ports[0]}"

    def cpu_seconds(self) -> list[float]:
        """Per node: CPU seconds the server process has used (INFO cpu, user + system).

        CPU time, not the wall-clock time of commands (``commandstats`` usec): on a
        machine where clients and servers fight for cores, a server descheduled in the
        middle of a command would count the wait as work."""
        import redis

        out = []
        for port in self.ports:
            cpu = redis.Redis(port=port).info("cpu")
            out.append(float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"]))
        return out

    def stop(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                process.kill()  # by PID (Popen.kill)
                process.wait(timeout=10)


# -- clients -----------------------------------------------------------------------------
def _setup_django(db_path: str, urls: dict[str, str], prefix: str) -> None:
    import django
    from django.conf import settings

    if not settings.configured:
        settings.configure(
            SECRET_KEY="bench",
            USE_TZ=True,
            INSTALLED_APPS=["django.contrib.contenttypes", "django.contrib.auth", "django_bloom"],
            DATABASES={
                "default": {
                    "ENGINE": "django.db.backends.sqlite3",
                    "NAME": db_path,
                    "OPTIONS": {"timeout": 30},
                }
            },
            CACHES={"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}},
            DEFAULT_AUTO_FIELD="django.db.models.BigAutoField",
            # Clients and servers share this machine's cores: a busy node may take longer
            # than the production 0.2 s to answer, which is not what is measured here.
            DJANGO_BLOOM={
                "KEY_PREFIX": prefix,
                "CLUSTERS": urls,
                "CACHE_ALIAS": "one",
                "SOCKET_TIMEOUT": 5.0,
                "CONNECT_TIMEOUT": 5.0,
            },
        )
        django.setup()


def _worker(conf: dict, name: str, op: str, index: int, start_at: float, queue) -> None:
    _setup_django(conf["db"], conf["urls"], conf["prefix"])
    import django_bloom

    f = django_bloom.get_filter(name)
    size, stop_after = conf["batch_size"], conf["seconds"]
    batches = [
        [f"w{index}-{op}-{b}-{i}" for i in range(size)] for b in range(conf["distinct_batches"])
    ]
    f.contains_many(batches[0][:10])  # connections up before the clock starts
    call = f.add_many if op == "add" else f.contains_many
    while time.time() < start_at:
        time.sleep(0.001)
    done, began = 0, time.perf_counter()
    try:
        while time.perf_counter() - began < stop_after:
            call(batches[done % len(batches)])
            done += 1
    except Exception as exc:  # reported by the parent, which then stops
        queue.put(("error", f"worker {index}: {exc!r}"))
        return
    queue.put((done * size, time.perf_counter() - began))


def _measure(conf: dict, name: str, op: str, cluster: Cluster) -> dict:
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    start_at = time.time() + 1.5  # every worker started and connected
    procs = [
        ctx.Process(target=_worker, args=(conf, name, op, i, start_at, queue))
        for i in range(conf["workers"])
    ]
    for p in procs:
        p.start()
    time.sleep(max(0.0, start_at - time.time()))
    before = cluster.cpu_seconds()
    results = [queue.get(timeout=120) for _ in procs]
    errors = [text for kind, text in results if kind == "error"]
    if errors:
        raise RuntimeError("; ".join(errors))
    after = cluster.cpu_seconds()
    for p in procs:
        p.join(timeout=30)
    items = sum(n for n, _s in results)
    wall = max(s for _n, s in results)
    busy = [a - b for a, b in zip(after, before, strict=True)]
    return {
        "items": items,
        "items_per_s": items / wall,
        "server_bound_items_per_s": items / max(busy) if max(busy) > 0 else float("inf"),
        "node_busy_s": busy,
    }


def run(args) -> dict:
    workdir = Path(tempfile.mkdtemp(prefix="bloom-bench-cluster-"))
    clusters: dict[str, Cluster] = {}
    try:
        (workdir / "one").mkdir()
        (workdir / "three").mkdir()
        clusters["one"] = Cluster(workdir / "one", 1)
        clusters["three"] = Cluster(workdir / "three", 3)
        conf = {
            "db": str(workdir / "db.sqlite3"),
            "urls": {alias: c.url for alias, c in clusters.items()},
            "prefix": f"bench-{uuid.uuid4().hex[:8]}",
            "batch_size": args.batch_size,
            "seconds": args.seconds,
            "workers": args.workers,
            "distinct_batches": 20,
        }
        _setup_django(conf["db"], conf["urls"], conf["prefix"])
        from django.core.management import call_command
        from django.db import connections

        import django_bloom

        call_command("migrate", verbosity=0)
        for alias in clusters:
            django_bloom.create_filter(
                f"scale-{alias}", capacity=CAPACITY, error_rate=ERROR_RATE, cache_alias=alias,
                layout="sharded", options={"segments": SEGMENTS},
            )  # fmt: skip
        from django_bloom.engine.storage import Storage

        spread = {}
        for alias in clusters:
            f = django_bloom.get_filter(f"scale-{alias}")
            conn = Storage(alias).conn
            owners = [conn.route(seg.keys.bits) for seg in f.layout.segments]
            spread[alias] = sorted(owners.count(o) for o in set(owners))
        connections.close_all()
        runs: dict[str, dict[str, list[dict]]] = {
            op: {alias: [] for alias in clusters} for op in ("add", "contains")
        }
        for _round in range(args.rounds):
            for op in ("add", "contains"):
                for alias in ("one", "three"):
                    runs[op][alias].append(_measure(conf, f"scale-{alias}", op, clusters[alias]))
        report = {
            "workers": args.workers,
            "batch_size": args.batch_size,
            "cpus": os.cpu_count(),
            "segments_per_node": spread,
        }
        for op, by_alias in runs.items():
            row = {}
            for alias, measured in by_alias.items():
                row[alias] = {
                    "items_per_s": statistics.median(m["items_per_s"] for m in measured),
                    "server_bound_items_per_s": statistics.median(
                        m["server_bound_items_per_s"] for m in measured
                    ),
                    "node_busy_s": measured[-1]["node_busy_s"],
                }
            row["ratio"] = row["three"]["items_per_s"] / row["one"]["items_per_s"]
            row["server_bound_ratio"] = (
                row["three"]["server_bound_items_per_s"] / row["one"]["server_bound_items_per_s"]
            )
            report[op] = row
        return report
    finally:
        for cluster in clusters.values():
            cluster.stop()
        shutil.rmtree(workdir, ignore_errors=True)


def table(report: dict) -> str:
    lines = [
        f"sharded filter ({SEGMENTS} segments), batches of {report['batch_size']}, "
        f"{report['workers']} client processes, {report['cpus']} CPU(s); segments per node: "
        f"{report['segments_per_node']['three']} (3 masters)",
        f"{'workload':<12}{'1 master':>14}{'3 masters':>14}{'ratio':>8}"
        f"{'server-bound 1':>17}{'3':>12}{'ratio':>8}",
    ]
    for op in ("add", "contains"):
        row = report[op]
        lines.append(
            f"{op + '_many':<12}{row['one']['items_per_s']:>14,.0f}"
            f"{row['three']['items_per_s']:>14,.0f}{row['ratio']:>7.2f}x"
            f"{row['one']['server_bound_items_per_s']:>17,.0f}"
            f"{row['three']['server_bound_items_per_s']:>12,.0f}{row['server_bound_ratio']:>7.2f}x"
        )
    lines.append(
        "items/s as the clients saw them (wall clock); server-bound = items / busiest node's "
        "CPU seconds (INFO cpu)"
    )
    return "\n".join(lines)


def main(argv=None) -> int:
    args = parse_args(argv)
    report = run(args)
    print(table(report))
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=2) + "\n")
    print(f"\nwrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
