"""The fault model's rig: a primary and a replica (RedisBloom loaded on both, bounded
memory, clocks a test can step: tests/clockshift.c), the worker processes A and B on a
SQLite file they share, and the faults the controller applies to the servers itself
(SIGSTOP, FLUSHALL, maxmemory, DUMP/RESTORE, an older RDB, a stepped clock, a failover)."""

from __future__ import annotations

import json
import os
import select
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import redis

from tests.conftest import ROOT, RedisServer, ServerClock, redisbloom_module

MAXMEMORY = "256mb"
SETTINGS = """\
import os
from tests.settings import *  # noqa
DATABASES = {"default": {"ENGINE": "django.db.backends.sqlite3",
                         "NAME": os.environ["BLOOM_FM_DB"], "OPTIONS": {"timeout": 30}}}
CACHES = {**CACHES, "default": {"BACKEND": "django_redis.cache.RedisCache",
                                "LOCATION": os.environ["BLOOM_FM_URL"]}}
DJANGO_BLOOM = {
    "KEY_PREFIX": os.environ["BLOOM_FM_PREFIX"],
    "WRITE_REPLICAS": 1,
    "SOCKET_TIMEOUT": 1.0,  # a busy machine: a timeout is a fault the model injects (freeze)
    "CONNECT_TIMEOUT": 1.0,
    "MIRROR_REFRESH_SECONDS": 1.0,  # another process's add may be unseen this long at most
    "BLOCKLIST_CAPACITY": 20_000,
    "BINDINGS": {"account-emails": {"source": "testapp.Account.email",
                                    "normalizer": "email_ci", "capacity": 20_000}},
}
"""


class Servers:
    """The primary and its replica; ports from ``BLOOM_FAULT_PORTS`` ("6451,6452") or free."""

    def __init__(self, directory: Path, clock_library: Path | None = None):
        self.directory = directory
        ports = os.environ.get("BLOOM_FAULT_PORTS")
        primary_port, replica_port = map(int, ports.split(",")) if ports else (None, None)
        module = redisbloom_module()
        self.native = module is not None
        extra = ["--loadmodule", module] if module else []
        extra += ["--maxmemory", MAXMEMORY, "--maxmemory-policy", "noeviction"]
        extra += ["--enable-debug-command", "local"]
        (directory / "primary").mkdir(exist_ok=True)
        (directory / "replica").mkdir(exist_ok=True)
        # Each server's clock, stepped by the controller (None: gcc could not build the shim).
        self.clocks = {
            role: ServerClock(clock_library, directory / role) if clock_library else None
            for role in ("primary", "replica")
        }
        self.shift = 0.0  # the primary's clock, seconds from the real time
        env = {role: clock.env if clock else None for role, clock in self.clocks.items()}
        self.primary = RedisServer(
            directory / "primary", *extra, port=primary_port, env=env["primary"]
        )
        self.replica = RedisServer(
            directory / "replica", *extra, "--replicaof", "127.0.0.1", str(self.primary.port),
            port=replica_port, env=env["replica"],
        )  # fmt: skip
        self.replica_paused = False
        self.wait_for_replica()

    @property
    def url(self) -> str:
        return self.primary.url

    def client(self) -> redis.Redis:
        return redis.Redis(port=self.primary.port, socket_timeout=30)

    def wait_for_replica(self, seconds: float = 60) -> None:
        """Until the primary counts the replica for WAIT (a busy machine: generous)."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            try:
                client = self.client()
                client.set("fm-sync-check", 1)
                if client.wait(1, 1000) == 1:
                    client.delete("fm-sync-check")
                    return
            except redis.RedisError:
                pass
            time.sleep(0.1)
        raise RuntimeError("the replica never caught up with the primary")

    def reset(self) -> None:
        """Between runs: everything running, empty, unbounded again, the clocks right."""
        self.set_clock(0.0)
        self.resume_replica()
        if self.primary.process.poll() is not None:
            self.primary.start()
        client = self.client()
        client.config_set("maxmemory", MAXMEMORY)
        client.flushall()
        self.wait_for_replica()

    def set_clock(self, shift: float, replica: float | None = None) -> None:
        """The primary's clock ``shift`` seconds from the real time, the replica's
        ``replica`` (default: the same; one host's clock stepped by NTP)."""
        self.shift = shift
        for role, value in (("primary", shift), ("replica", shift if replica is None else replica)):
            if self.clocks[role] is not None:
                self.clocks[role].set(value)

    def failover(self, lag: float) -> None:
        """A failover to the replica, whose clock is ``lag`` seconds off the primary's: it
        has every write (it is resumed and caught up first: WAIT acknowledged them), and it
        serves at the primary's address from now on (the primary restarted on the replica's
        RDB with the replica's clock: a new run_id; the replica then resyncs from it)."""
        self.resume_replica()
        self.wait_for_replica()
        self.replica.client().save()
        self.primary.kill()
        shutil.copy(self.replica.directory / "dump.rdb", self.primary.directory / "dump.rdb")
        self.set_clock(self.shift + lag)
        self.primary.start()
        self.client().config_set("maxmemory", MAXMEMORY)
        self.wait_for_replica()

    def pause_replica(self) -> None:
        if not self.replica_paused:
            self.replica.pause()
            self.replica_paused = True

    def resume_replica(self) -> None:
        if self.replica_paused:
            self.replica.resume()
            self.replica_paused = False

    def fill_up(self) -> None:
        """``maxmemory`` just above what is used: the next sizeable write is refused."""
        client = self.client()
        used = client.info("memory")["used_memory"]
        client.config_set("maxmemory", used + 64 * 1024)

    def unbound(self) -> None:
        self.client().config_set("maxmemory", MAXMEMORY)

    def dump(self, pattern: str) -> dict[bytes, bytes]:
        client = self.client()
        return {key: client.dump(key) for key in client.scan_iter(match=pattern, count=1000)}

    def restore(self, dumps: dict[bytes, bytes]) -> None:
        client = self.client()
        for key, value in dumps.items():
            if value is not None:
                client.restore(key, 0, value, replace=True)

    def write_counter(self, pattern: str) -> int:
        """The write counters of the ``pattern`` keys that end in a trailer (``:bits``),
        summed: the trailer's last 8 bytes, a big-endian i64 (engine/format.py)."""
        client = self.client()
        total = 0
        for key in client.scan_iter(match=pattern, count=1000):
            if key.endswith(b":bits") and client.type(key) == b"string":  # not native's
                tail = client.getrange(key, -8, -1)
                total += int.from_bytes(tail, "big", signed=True) if len(tail) == 8 else 0
        return total

    def drop_clients(self) -> None:
        """``CLIENT KILL TYPE normal``: Redis closes every client connection but the
        killer's (as its idle ``timeout`` does, or a restart on the same address). Redis
        closes them before it replies; wait until none is listed, then a moment more: on a
        loaded machine the kernel may hand a client its socket's end later (deferred network
        work), and a call that begins before its process can see the close races it, as any
        call does with a close (it failed a loaded run: "Broken pipe")."""
        client = self.client()
        killed = {entry["id"] for entry in client.client_list(_type="normal")}
        killed.discard(str(client.client_id()))
        client.execute_command("CLIENT", "KILL", "TYPE", "normal")
        deadline = time.monotonic() + 30
        while killed & {entry["id"] for entry in client.client_list(_type="normal")}:
            if time.monotonic() > deadline:
                raise RuntimeError("Redis did not close the killed clients in 30 s")
            time.sleep(0.005)
        time.sleep(0.05)

    def save(self, name: str) -> Path:
        self.client().save()
        kept = self.directory / f"{name}.rdb"
        shutil.copy(self.primary.directory / "dump.rdb", kept)
        return kept

    def rewind(self, rdb: Path, how: str) -> None:
        """The primary back at ``rdb``: restarted on it (SIGKILL: a new run_id), or
        ``DEBUG RELOAD NOSAVE`` of it (the same process and identity)."""
        if how == "restart":
            self.primary.kill()
            shutil.copy(rdb, self.primary.directory / "dump.rdb")
            self.primary.start()
            self.client().config_set("maxmemory", MAXMEMORY)
        else:
            shutil.copy(rdb, self.primary.directory / "dump.rdb")
            self.client().execute_command("DEBUG", "RELOAD", "NOSAVE")

    def keys(self, prefix: str) -> set[bytes]:
        return set(self.client().scan_iter(match=f"{prefix}:*", count=1000))

    def stop(self) -> None:
        self.replica.kill()
        self.primary.kill()


class WorkerDied(RuntimeError):
    pass


class Worker:
    """One worker process (tests/faultmodel/worker.py), spoken to over its pipes."""

    def __init__(self, role: str, env: dict[str, str], log: Path):
        self.role = role
        self.log = log
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.faultmodel.worker", role],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log.open("ab"),
            env=env, cwd=ROOT,
        )  # fmt: skip
        self.buffer = b""

    def ready(self) -> Worker:
        self.read_reply(120)
        return self

    def call(self, op: str, timeout: float = 120, **arguments):
        self.process.stdin.write((json.dumps({"op": op, **arguments}) + "\n").encode())
        self.process.stdin.flush()
        reply = self.read_reply(timeout)
        if os.environ.get("BLOOM_FAULT_TRACE"):
            sent, got = json.dumps(arguments)[:150], json.dumps(reply)[:300]
            print(f"    {self.role} {op} {sent} -> {got}")
        return reply

    def read_reply(self, timeout: float) -> dict:
        deadline = time.monotonic() + timeout
        out = self.process.stdout.fileno()
        while b"\n" not in self.buffer:
            left = deadline - time.monotonic()
            if left <= 0 or self.process.poll() is not None:
                tail = self.log.read_text(errors="replace")[-2000:]
                raise WorkerDied(f"worker {self.role} gave no reply:\n{tail}")
            if select.select([out], [], [], min(left, 1.0))[0]:
                chunk = os.read(out, 1 << 20)
                if not chunk:
                    continue
                self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        return json.loads(line)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.stdin.close()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)


class Rig:
    """The servers, a migrated template database, and a fresh pair of workers per run."""

    def __init__(self, directory: Path, clock_library: Path | None = None):
        self.directory = directory
        self.servers = Servers(directory, clock_library)
        (directory / "fm_settings.py").write_text(SETTINGS)
        self.template = directory / "template.sqlite3"
        worker = Worker("B", self.env(self.template, "fm-template"), directory / "migrate.log")
        worker.ready()
        try:
            assert "err" not in worker.call("migrate", timeout=300)
            self.capabilities = worker.call("hello")["ok"]
        finally:
            worker.stop()
        if not self.servers.native:
            self.capabilities["kinds"].remove("native")
        self.capabilities["clock"] = clock_library is not None
        self.spare: tuple | None = None
        self.pairs = 0

    def env(self, db: Path, prefix: str) -> dict[str, str]:
        return {
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(self.directory), str(ROOT)]),
            "DJANGO_SETTINGS_MODULE": "fm_settings",
            "BLOOM_FM_DB": str(db),
            "BLOOM_FM_URL": self.servers.url,
            "BLOOM_FM_PREFIX": prefix,
        }

    def workers(self) -> tuple[str, Worker, Worker]:
        """A new prefix, a copy of the template database, workers A and B on them. The
        next run's pair starts now, while this run executes (a replay costs less)."""
        self.servers.reset()
        pair, self.spare = (self.spare or self.start_pair()), None
        self.spare = self.start_pair()
        prefix, a, b = pair
        return prefix, a.ready(), b.ready()

    def start_pair(self) -> tuple[str, Worker, Worker]:
        self.pairs += 1
        prefix = f"fm-{uuid.uuid4().hex[:10]}"
        db = self.directory / f"run-{self.pairs}.sqlite3"
        shutil.copy(self.template, db)
        env = self.env(db, prefix)
        log = self.directory / f"workers-{self.pairs}.log"
        return prefix, Worker("A", env, log), Worker("B", env, log)

    def stop(self) -> None:
        if self.spare:
            for worker in self.spare[1:]:
                worker.stop()
        self.servers.stop()
