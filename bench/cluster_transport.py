"""Same-run A/B of the engine's cluster transport against redis-py's RedisCluster/ClusterPipeline.

    python -m bench.cluster_transport [--batch-size 1000] [--calls 20] [--singles 300] [--rounds 5]
    python -m bench.cluster_transport --killed-node [--tries 5] [--stopped-node]
    python -m bench.cluster_transport --moved [--rounds 5]

Starts one 3-master Redis Cluster (bench/cluster.py's ``Cluster``, on free ports,
stopped by PID) and one sharded filter (12 segments, as ``python -m bench --cluster``)
on it, reached through ``DJANGO_BLOOM["CLUSTERS"]``.

Speed (default). The same batches, alternated round by round in the same run:

- ``engine``: ``Filter.contains_many`` / ``add_many`` / ``contains``: RESP packed by
  ``transport/packing.py``, every node's commands written before any reply is read
  (``transport/cluster.ClusterConnection.send_groups``);
- ``redis-py``: the very same commands (the engine's hashing, ``ShardedLayout.split``
  into segments, one ``BITFIELD_RO`` / ``BITFIELD`` per segment with the arguments
  ``packing.pack_test`` / ``pack_set`` pack: checked byte for byte before timing)
  queued on ``RedisCluster(...).pipeline()`` (ClusterPipeline, which also writes
  every node's commands before reading any reply: ``_send_cluster_commands``); a single
  ``contains`` through ``RedisCluster.execute_command``. Replies are read with the
  engine's ``split_reply`` / ``per_item``.

Prints median µs per call, items/s and the ratio redis-py / engine (> 1: redis-py
slower), and the server-bound figure: items / busiest node's CPU seconds over the
same calls (``INFO cpu``, as bench/cluster.py computes it).

``--killed-node``: one master is SIGKILLed (no replica; ``cluster-node-timeout`` raised
to 300 s so the survivors keep serving during the measurement), then each client in
turn (interleaved) runs a batch ``contains_many`` touching every node, ``--tries``
times, then single ``contains`` on an item of the dead node and of a live one. Clients:
the engine (its production settings: 0.2 s timeouts, per-node breaker), redis-py with
the engine's timeouts (``socket_timeout=socket_connect_timeout=0.2``) and its default
retries (``Retry(ExponentialWithJitterBackoff, 10)``: a topology refresh per retry), the
same with no retries, and redis-py with its defaults (no timeouts, 10 retries). Prints
seconds to raise, the exception and how many topology refreshes
(``NodesManager.initialize``) each call ran. ``--stopped-node`` does the same with
SIGSTOP (a hung node: the timeouts decide), each call capped at ``--cap`` seconds.

``--moved``: every slot of each client's slot map pointed at the wrong master, then one
batch: MOVED from every node (the engine re-sends each node's group after a refresh;
ClusterPipeline re-sends each redirected command alone through ``execute_command``).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import os
import shutil
import signal
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from bench.cluster import CAPACITY, ERROR_RATE, SEGMENTS, Cluster, _setup_django  # noqa: E402


def parse_args(argv=None):
    ap = argparse.ArgumentParser(
        prog="python -m bench.cluster_transport", description=__doc__.split("\n")[0]
    )
    ap.add_argument("--batch-size", type=int, default=1000)
    ap.add_argument("--calls", type=int, default=20, help="batches per way, workload and round")
    ap.add_argument("--singles", type=int, default=300, help="single contains per way and round")
    ap.add_argument("--rounds", type=int, default=5, help="alternating rounds")
    ap.add_argument("--killed-node", action="store_true", help="failure handling, SIGKILL")
    ap.add_argument("--stopped-node", action="store_true", help="failure handling, SIGSTOP")
    ap.add_argument("--moved", action="store_true", help="a stale slot map: MOVED everywhere")
    ap.add_argument("--tries", type=int, default=5, help="batch calls per client after the kill")
    ap.add_argument("--cap", type=float, default=20.0, help="seconds a call may hang (SIGSTOP)")
    ap.add_argument("--quick", action="store_true", help="tiny run for smoke tests")
    args = ap.parse_args(argv)
    if args.quick:
        args.calls, args.singles, args.rounds, args.tries = 3, 20, 2, 2
    return args


# -- the same commands, through redis-py -------------------------------------------
class RedisPyWay:
    """The engine's commands for a sharded filter, sent through redis-py's cluster client."""

    def __init__(self, f, rc):
        from django_bloom.engine.transport.packing import item_chunks

        self.f, self.rc = f, rc
        self.bound = f._bound
        self.layout = self.bound.layout
        self.k = self.layout.segment.num_hashes
        self.chunks = item_chunks

    @staticmethod
    def test_args(seg, local) -> list:
        """``packing.pack_test``'s command as arguments: trailer fingerprint, k bits per item."""
        t_bit = seg.trailer_offset * 8
        ops = [x for g in local for x in ("GET", "u1", g)]
        return ["BITFIELD_RO", seg.keys.bits, "GET", "u32", t_bit, *ops]

    @staticmethod
    def set_args(seg, local, stamp=None) -> list:
        """``packing.pack_set``'s command: read the trailer, SET u1 each bit, stamp the
        trailer (a new stamp unless ``stamp`` is given), bump the counter."""
        from django_bloom.engine.format import new_stamp

        t_bit = seg.trailer_offset * 8
        ops = [x for g in local for x in ("SET", "u1", g, 1)]
        stamp = new_stamp() if stamp is None else stamp
        return ["BITFIELD", seg.keys.bits, "GET", "u40", t_bit, *ops, "SET", "u24", t_bit + 40,
                stamp, "OVERFLOW", "WRAP", "INCRBY", "i64", t_bit + 64, 1]  # fmt: skip

    def _plan(self, items, make_args, pipe):
        digests, flat = self.f._digest_many(items, self.bound)
        plan = []
        for j, local, rows in self.layout.split(flat):
            seg = self.layout.shards[j]
            local = local.tolist() if hasattr(local, "tolist") else local
            chunks = list(self.chunks(local, self.k))
            for chunk in chunks:
                pipe.execute_command(*make_args(seg, chunk))
            plan.append((seg, len(chunks), rows))
        return plan

    def contains_many(self, items) -> list[bool]:
        from django_bloom.engine.segment import key_missing
        from django_bloom.engine.transport.packing import per_item, split_reply

        pipe = self.rc.pipeline()
        plan = self._plan(items, self.test_args, pipe)
        replies = iter(pipe.execute())
        out = [False] * len(items)
        for seg, count, rows in plan:
            answers: list[bool] = []
            for _ in range(count):
                head, bits, _ = split_reply(next(replies), 1, 0)
                if head[0] != seg.fingerprint:
                    raise key_missing(seg)
                answers += per_item(bits, None, self.k, want_all=True)
            for index, answer in zip(rows, answers, strict=True):
                out[index] = answer
        return out

    def add_many(self, items) -> list[bool]:
        from django_bloom.engine.segment import key_missing
        from django_bloom.engine.transport.packing import per_item, split_reply

        pipe = self.rc.pipeline()
        plan = self._plan(items, self.set_args, pipe)
        replies = iter(pipe.execute())
        was_new = [False] * len(items)
        for seg, count, rows in plan:
            answers: list[bool] = []
            for _ in range(count):
                head, bits, _ = split_reply(next(replies), 1, 2)
                if head[0] >> 8 != seg.fingerprint:
                    raise key_missing(seg)
                answers += per_item(bits, None, self.k, want_all=False)
            for index, answer in zip(rows, answers, strict=True):
                was_new[index] = answer
        return was_new

    def contains(self, item) -> bool:
        from django_bloom.engine.segment import key_missing

        _digest, flat = self.f._digest_one(item, self.bound)
        ((j, local, _rows),) = self.layout.split(flat)
        seg = self.layout.shards[j]
        reply = self.rc.execute_command(*self.test_args(seg, local))
        if reply[0] != seg.fingerprint:
            raise key_missing(seg)
        return 0 not in reply[1:]

    def check_same_commands(self, items) -> int:
        """The commands redis-py sends are byte for byte the engine's (packing.pack_test /
        pack_set on the same segment and positions, in item order). Returns commands checked."""
        import functools

        from redis.connection import Connection

        from django_bloom.engine.transport import packing
        from django_bloom.engine.transport.packing import pack_set, pack_test

        pack = Connection().pack_command
        _digests, flat = self.f._digest_many(items, self.bound)
        checked = 0
        stamped = functools.partial(self.set_args, stamp=1234567)
        drawn, packing.new_stamp = packing.new_stamp, lambda: 1234567  # the same stamp, once
        try:
            for j, local, _rows in self.layout.split(flat):
                seg = self.layout.shards[j]
                local = [int(g) for g in local]
                for make_args, engine_pack in ((self.test_args, pack_test), (stamped, pack_set)):
                    ours = b"".join(
                        b"".join(pack(*make_args(seg, chunk)))
                        for chunk in self.chunks(local, self.k)
                    )
                    if ours != engine_pack(seg, local).payload:
                        raise AssertionError(
                            f"redis-py's command differs from the engine's ({seg.name})"
                        )
                    checked += 1
        finally:
            packing.new_stamp = drawn
        return checked


# -- speed ---------------------------------------------------------------------------
def _start(workdir: Path) -> tuple[Cluster, str]:
    """A 3-master cluster in ``workdir``; Django set up once per process (its database
    beside ``workdir``, which main removes), the cluster named "three"."""
    (workdir / "three").mkdir(parents=True)
    cluster = Cluster(workdir / "three", 3)
    prefix = f"bench-ct-{uuid.uuid4().hex[:8]}"
    _setup_django(str(workdir.parent / "db.sqlite3"), {"three": cluster.url}, prefix)
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    return cluster, prefix


def _server_work(cluster: Cluster) -> list[int]:
    """Summed over the nodes: commands run, socket reads, bytes received (INFO)."""
    import redis

    commands = reads = received = 0
    for port in cluster.ports:
        info = redis.Redis(port=port).info("all")
        commands += int(info["total_commands_processed"])
        reads += int(info["total_reads_processed"])
        received += int(info["total_net_input_bytes"])
    return [commands, reads, received]


def _filter(name: str):
    import django_bloom

    return django_bloom.create_filter(
        name, capacity=CAPACITY, error_rate=ERROR_RATE, cache_alias="three",
        layout="sharded", options={"segments": SEGMENTS},
    )  # fmt: skip


def run_speed(args, workdir: Path) -> None:
    import redis

    cluster = None
    try:
        cluster, _prefix = _start(workdir)
        f = _filter("ct")
        rc = redis.RedisCluster.from_url(
            cluster.url,
            socket_timeout=5.0,
            socket_connect_timeout=5.0,  # as bench/cluster.py
        )
        rp = RedisPyWay(f, rc)
        size = args.batch_size
        batches = [[f"c{b}-{i}" for i in range(size)] for b in range(args.calls)]
        for batch in batches:
            f.add_many(batch[::2])  # half present, half absent
        checked = rp.check_same_commands(batches[0])
        for batch in batches[:3]:
            assert rp.contains_many(batch) == f.contains_many(batch)
        singles = [f"c{i % args.calls}-{i * 7 % size}" for i in range(args.singles)]
        assert [rp.contains(i) for i in singles[:50]] == [f.contains(i) for i in singles[:50]]
        conn = f.storage.conn
        owners = [conn.route(seg.keys.bits) for seg in f.layout.segments]
        spread = sorted(owners.count(o) for o in set(owners))

        def add_batches(way: str, round_: int):
            return [[f"a{way}{round_}-{b}-{i}" for i in range(size)] for b in range(args.calls)]

        workloads = {
            "contains_many": {
                "engine": lambda r: [f.contains_many(b) for b in batches],
                "redis-py": lambda r: [rp.contains_many(b) for b in batches],
            },
            "add_many": {  # fresh items for every way and round: every add writes new bits
                "engine": lambda r: [f.add_many(b) for b in r],
                "redis-py": lambda r: [rp.add_many(b) for b in r],
            },
            "contains": {
                "engine": lambda r: [f.contains(i) for i in singles],
                "redis-py": lambda r: [rp.contains(i) for i in singles],
            },
        }
        calls = {"contains_many": args.calls, "add_many": args.calls, "contains": args.singles}
        items_per_call = {"contains_many": size, "add_many": size, "contains": 1}
        times = {w: {way: [] for way in ways} for w, ways in workloads.items()}
        server = {w: {way: [] for way in ways} for w, ways in workloads.items()}
        net = {w: {way: [] for way in ways} for w, ways in workloads.items()}
        work = {w: {way: [0, 0, 0] for way in ways} for w, ways in workloads.items()}
        # An idle cluster node burns CPU too (serverCron, the cluster bus): per node, CPU s
        # per wall s, taken off each block's busy time for the "net" server-bound figure
        # (the slower way's block lasts longer, so it is charged more idle CPU).
        before, idle_start = cluster.cpu_seconds(), time.perf_counter()
        time.sleep(2.0)
        idle_wall = time.perf_counter() - idle_start
        idle = [(a - b) / idle_wall for a, b in zip(cluster.cpu_seconds(), before, strict=True)]
        for round_ in range(args.rounds):
            for workload, ways in workloads.items():
                order = list(ways) if round_ % 2 == 0 else list(reversed(ways))
                for way in order:
                    arg = add_batches(way, round_) if workload == "add_many" else None
                    work_before = _server_work(cluster)
                    before = cluster.cpu_seconds()
                    start = time.perf_counter()
                    ways[way](arg)
                    elapsed = time.perf_counter() - start
                    busy = [a - b for a, b in zip(cluster.cpu_seconds(), before, strict=True)]
                    work[workload][way] = [
                        t + a - b
                        for t, a, b in zip(
                            work[workload][way], _server_work(cluster), work_before, strict=True
                        )
                    ]
                    times[workload][way].append(elapsed / calls[workload] * 1e6)
                    items = calls[workload] * items_per_call[workload]
                    server[workload][way].append(items / max(busy) if max(busy) > 0 else 0.0)
                    worked = [b - r * elapsed for b, r in zip(busy, idle, strict=True)]
                    net[workload][way].append(items / max(worked) if max(worked) > 0 else 0.0)
        print(
            f"sharded filter ({SEGMENTS} segments on 3 masters: {spread} per node), "
            f"{args.rounds} alternating rounds, {os.cpu_count()} CPU(s); redis-py "
            f"{redis.__version__}; {checked} commands checked byte for byte equal"
        )
        print(
            f"{'workload':<26}{'way':<10}{'µs/call':>10}{'items/s':>12}{'x engine':>10}"
            f"{'server-bound':>15}{'x engine':>10}{'net of idle':>14}{'x engine':>10}"
        )
        for workload in workloads:
            label = (
                f"{workload} ({args.calls} x {size})"
                if workload != "contains"
                else f"contains ({args.singles})"
            )
            base_t = statistics.median(times[workload]["engine"])
            base_s = statistics.median(server[workload]["engine"])
            base_n = statistics.median(net[workload]["engine"])
            for way in workloads[workload]:
                t = statistics.median(times[workload][way])
                s = statistics.median(server[workload][way])
                n = statistics.median(net[workload][way])
                print(
                    f"{label:<26}{way:<10}{t:>10,.0f}{items_per_call[workload] / t * 1e6:>12,.0f}"
                    f"{t / base_t:>9.2f}x{s:>15,.0f}{s / base_s:>9.2f}x"
                    f"{n:>14,.0f}{n / base_n:>9.2f}x"
                )
                label = ""
        print(
            "µs/call: median over rounds (x engine > 1: redis-py slower); server-bound = items / "
            "busiest node's CPU s (INFO cpu) over the same calls (x engine < 1: redis-py costs "
            "the servers more); net of idle: the same less each node's idle CPU rate "
            f"({', '.join(f'{r * 1000:.1f}' for r in idle)} ms/s) x the block's wall time"
        )
        print("what the servers got, all rounds, 3 nodes (INFO stats; INFO calls included):")
        for workload, ways in work.items():
            for way, (commands, reads, received) in ways.items():
                print(
                    f"  {workload:<14}{way:<10}{commands:>9,} commands{reads:>9,} socket reads"
                    f"{received:>14,} bytes in"
                )
        f.delete()
    finally:
        from django_bloom import counters

        counters.discard_pending()  # items_added of a filter on a cluster about to stop
        if cluster is not None:
            cluster.stop()


# -- failure handling ------------------------------------------------------------------
def _counting_refreshes(nodes_manager) -> list:
    """Wrap ``nodes_manager.initialize`` (the topology refresh): the list of their durations."""
    made: list[float] = []
    original = nodes_manager.initialize

    def initialize(*a, **kw):
        start = time.perf_counter()
        try:
            return original(*a, **kw)
        finally:
            made.append(time.perf_counter() - start)

    nodes_manager.initialize = initialize
    return made


def run_failure(args, how: str, workdir: Path) -> None:
    import redis
    from django.test import override_settings
    from redis.backoff import NoBackoff
    from redis.retry import Retry

    cluster = None
    victim = None
    executors: dict[str, concurrent.futures.ThreadPoolExecutor] = {}
    try:
        cluster, prefix = _start(workdir)
        from django_bloom import services

        for port in cluster.ports:  # the survivors keep serving during the measurement
            redis.Redis(port=port).config_set("cluster-node-timeout", 300000)
        engine_config = {
            "KEY_PREFIX": prefix,
            "CLUSTERS": {"three": cluster.url},
            "CACHE_ALIAS": "three",
        }  # the engine's production timeouts (0.2 s) and breaker
        with override_settings(DJANGO_BLOOM=engine_config):
            services.forget_filters()
            f = _filter("ct-" + how)
            size = args.batch_size
            items = [f"k-{i}" for i in range(size)]
            f.add_many(items)
            layout = f.layout
            conn = f.storage.conn
            owners = [conn.route(seg.keys.bits) for seg in layout.segments]
            victim_address = owners[1]
            victim = cluster.processes[cluster.ports.index(victim_address[1])]

            def owner_of(item) -> tuple:
                _d, flat = f._digest_one(item)
                ((j, _local, _rows),) = layout.split(flat)
                return owners[j]

            lost = next(i for i in items if owner_of(i) == victim_address)
            alive = next(i for i in items if owner_of(i) != victim_address)
            survivors_batch = [i for i in items if owner_of(i) != victim_address]

            fast = {"socket_timeout": 0.2, "socket_connect_timeout": 0.2}
            no_retry = Retry(NoBackoff(), 0)
            clients = {
                "engine (0.2 s, breaker)": None,
                "redis-py 0.2 s, 10 retries": redis.RedisCluster.from_url(cluster.url, **fast),
                "redis-py 0.2 s, no retry": redis.RedisCluster.from_url(
                    cluster.url, retry=no_retry, **fast
                ),
                "redis-py defaults": redis.RedisCluster.from_url(cluster.url),
            }
            ways, refreshes = {}, {}
            for name, rc in clients.items():
                if rc is None:
                    ways[name] = f
                    refreshes[name] = _counting_refreshes(conn.topology.nodes_manager)
                else:
                    ways[name] = RedisPyWay(f, rc)
                    refreshes[name] = _counting_refreshes(rc.nodes_manager)
                # one thread per client, kept: its kept connections stay warm; a call
                # still hanging after --cap leaves that client out of later calls
                executors[name] = concurrent.futures.ThreadPoolExecutor(1)
                assert executors[name].submit(ways[name].contains_many, items).result(30)
                assert executors[name].submit(ways[name].contains, alive).result(30)
            blocked: set[str] = set()
            late: dict[str, tuple[float, str]] = {}  # a blocked call: when it ended, and how

            def timed(name: str, call, *call_args) -> str:
                if name in blocked:
                    return "(still blocked)"
                made = refreshes[name]
                before = len(made)
                start = time.perf_counter()
                future = executors[name].submit(call, *call_args)
                try:
                    future.result(args.cap)
                    outcome = "ok"
                except concurrent.futures.TimeoutError:
                    blocked.add(name)
                    future.add_done_callback(
                        lambda done, n=name, t=start: late.setdefault(
                            n, (time.perf_counter() - t, type(done.exception()).__name__)
                        )
                    )
                    return f"> {args.cap:.0f} s, still blocked"
                except Exception as exc:  # what we measure
                    outcome = type(exc).__name__
                elapsed = time.perf_counter() - start
                spent = sum(made[before:])
                return (
                    f"{elapsed * 1000:8.1f} ms {outcome:<20} refreshes {len(made) - before:>2} "
                    f"({spent * 1000:.1f} ms)"
                )

            if how == "kill":
                victim.kill()  # SIGKILL, by PID
                victim.wait(timeout=10)
            else:
                os.kill(victim.pid, signal.SIGSTOP)
            print(
                f"{how.upper()}: master :{victim_address[1]} ({owners.count(victim_address)} of "
                f"{SEGMENTS} segments, no replica) at t=0; cluster-node-timeout 300 s; redis-py "
                f"{redis.__version__}"
            )
            killed_at = time.monotonic()
            results: dict[str, list[str]] = {name: [] for name in clients}
            for _try in range(args.tries):
                for name in clients:
                    results[name].append(timed(name, ways[name].contains_many, items))
            for name, lines in results.items():
                print(f"  {name}: contains_many({size}) touching every node")
                for n, line in enumerate(lines, 1):
                    print(f"    call {n}: {line}")
            for label, call, arg in (
                ("single contains, item on the dead node", "contains", lost),
                ("single contains, item on a live node", "contains", alive),
                (
                    f"contains_many of the {len(survivors_batch)} items on live nodes",
                    "contains_many",
                    survivors_batch,
                ),
            ):
                print(f"  {label}:")
                for name in clients:
                    print(f"    {name:<28} {timed(name, getattr(ways[name], call), arg)}")
            print(f"  (all of the above within {time.monotonic() - killed_at:.1f} s of the {how})")
            for name in sorted(blocked):
                ended = late.get(name)
                print(
                    f"  {name}: its blocked call "
                    + (
                        f"ended after {ended[0]:.1f} s ({ended[1]})"
                        if ended
                        else f"still blocked {time.monotonic() - killed_at:.1f} s after the {how}"
                    )
                )
            services.forget_filters()
    finally:
        if victim is not None and how == "stop" and victim.poll() is None:
            os.kill(victim.pid, signal.SIGCONT)
        for executor in executors.values():
            executor.shutdown(wait=False, cancel_futures=True)
        from django_bloom import counters

        counters.discard_pending()  # items_added of a filter on a cluster about to stop
        if cluster is not None:
            cluster.stop()


def _stale(nodes_manager) -> None:
    """Every slot "owned" by the next primary: each command first gets MOVED (as the
    engine's test_a_stale_slot_map_is_corrected_by_moved does)."""
    cache = nodes_manager.slots_cache
    primaries = sorted({owners[0].name: owners[0] for owners in cache.values()}.items())
    order = [node for _name, node in primaries]
    for slot, owners in list(cache.items()):
        cache[slot] = [order[(order.index(owners[0]) + 1) % len(order)]]


def run_moved(args, workdir: Path) -> None:
    """A stale slot map (every slot on the wrong node): the first batch after it meets
    MOVED on every node; the engine and ClusterPipeline both follow it. Rounds alternate."""
    import redis

    cluster = None
    try:
        cluster, _prefix = _start(workdir)
        f = _filter("ct-moved")
        size = args.batch_size
        items = [f"m-{i}" for i in range(size)]
        f.add_many(items)
        rc = redis.RedisCluster.from_url(
            cluster.url, socket_timeout=5.0, socket_connect_timeout=5.0
        )
        clients = {
            "engine": (f, f.storage.conn.topology.nodes_manager),
            "redis-py": (RedisPyWay(f, rc), rc.nodes_manager),
        }
        refreshes = {name: _counting_refreshes(nm) for name, (_way, nm) in clients.items()}
        results: dict[str, list[tuple[float, int, float]]] = {name: [] for name in clients}
        for way, _nodes_manager in clients.values():
            assert all(way.contains_many(items))
        for round_ in range(args.rounds):
            order = list(clients) if round_ % 2 == 0 else list(reversed(clients))
            for name in order:
                way, nodes_manager = clients[name]
                _stale(nodes_manager)
                made = refreshes[name]
                before = len(made)
                start = time.perf_counter()
                assert all(way.contains_many(items)), name
                stale = time.perf_counter() - start
                start = time.perf_counter()
                assert all(way.contains_many(items)), name
                fixed = time.perf_counter() - start
                results[name].append((stale, len(made) - before, fixed))
        print(
            f"MOVED: every slot mapped to the wrong master, then contains_many({size}) over "
            f"{SEGMENTS} segments on 3 masters; {args.rounds} alternating rounds (median)"
        )
        base = statistics.median(r[0] for r in results["engine"])
        for name, rows in results.items():
            stale = statistics.median(r[0] for r in rows)
            print(
                f"  {name:<10} first call {stale * 1000:7.1f} ms ({stale / base:.2f}x engine), "
                f"topology refreshes {statistics.median(r[1] for r in rows):.0f}; next call "
                f"{statistics.median(r[2] for r in rows) * 1000:6.1f} ms"
            )
        f.delete()
    finally:
        from django_bloom import counters

        counters.discard_pending()
        if cluster is not None:
            cluster.stop()


def main(argv=None) -> int:
    args = parse_args(argv)
    base = Path(tempfile.mkdtemp(prefix="bloom-bench-ct-"))
    try:
        if args.moved:
            run_moved(args, base / "moved")
        elif not (args.killed_node or args.stopped_node):
            run_speed(args, base / "speed")
        if args.killed_node:
            run_failure(args, "kill", base / "kill")
        if args.stopped_node:
            if args.killed_node:
                print()
            run_failure(args, "stop", base / "stop")
    finally:
        shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
