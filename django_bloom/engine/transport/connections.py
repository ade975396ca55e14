"""The filter engine's own Redis connections: the cache's settings, our timeouts.

django-redis passes socket timeouts only when its OPTIONS name them, and
redis-py's defaults are 5 s (6.0 and later) or none at all (5.x): a Redis that
accepts connections but never answers would cost every request that long. The
engine therefore never uses the cache's pooled connections. It makes its own
with the pool's ``make_connection()`` (same class, host, TLS, password, db,
Sentinel discovery) and sets, before they connect:

- ``SOCKET_TIMEOUT`` for every read (the hot path and the small commands),
- ``CONNECT_TIMEOUT`` for the TCP connect,
- no retries (the circuit breaker decides when to try again),
- ``SLOW_COMMAND_TIMEOUT`` for the few commands that allocate or copy a whole
  filter (methods decorated with ``@slow``).

``EngineConnection`` is the one door to Redis: the kept hot-path connections,
RESP send and read, and the one mapping of redis-py's errors to django-bloom's
(``redis_failure``, errors.py). A cluster-aware connection plugs in here.

``EnginePool`` stands in for the cache's pool behind a copy of its redis-py
client (cache_client.py: django-redis or Django's RedisCache), so
``execute_command``, ``eval`` and pipelines run on these connections; the hot
path keeps the ones it borrows (``EnginePool.kept``).
"""

from __future__ import annotations

import contextvars
import copy
import functools
import os
import select
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from redis import exceptions as redis_errors
from redis.backoff import NoBackoff
from redis.retry import Retry

from django_bloom.conf import get_config
from django_bloom.engine.transport.breaker import breaker_for, guarded
from django_bloom.engine.transport.cache_client import redis_client
from django_bloom.engine.transport.errors import CONNECTION_ERRORS, mapped_errors, redis_failure
from django_bloom.engine.transport.packing import ReplyError, arguments, header
from django_bloom.exceptions import (
    WriteNotReplicated,
)

_slow: contextvars.ContextVar[bool] = contextvars.ContextVar("bloom_slow", default=False)


def slow(method: Callable) -> Callable:
    """Run ``method``'s commands with ``SLOW_COMMAND_TIMEOUT`` instead of ``SOCKET_TIMEOUT``."""

    @functools.wraps(method)
    def call(*args: Any, **kwargs: Any) -> Any:
        token = _slow.set(True)
        try:
            return method(*args, **kwargs)
        finally:
            _slow.reset(token)

    return call


def _set_read_timeout(conn: Any, seconds: float) -> None:
    conn.socket_timeout = seconds
    sock = getattr(conn, "_sock", None)
    if sock is not None:
        sock.settimeout(seconds)


class EnginePool:
    """The engine's connections to one cache pool's server (see module doc).

    Everything but getting and releasing connections is the wrapped pool's
    (encoder, connection_kwargs, protocol...).

    ``kept`` holds the hot path's connections, each with when it was given back
    (``EngineConnection.borrow`` and
    ``give_back``). pool.get_connection()/release() cost ~11 us per call in
    redis-py 8, a tenth of a single add, so the hot path keeps the connections
    it borrowed (one per thread that was inside an add/contains at the same
    time) in this LIFO list: list.pop/append are atomic, so no lock. A
    connection the pool disconnected (pool.disconnect() covers in-use ones), or
    that Redis closed (``_server_closed``), reconnects when next borrowed.
    """

    def __init__(self, pool: Any, alias: str):
        self.pool = pool
        self.alias = alias
        self.breaker = breaker_for(alias)
        self._free: list[Any] = []
        self.kept: list[Any] = []
        self._pid = os.getpid()
        self._probe_conn: Any = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self.pool, name)

    def make_connection(self, counted: bool = True) -> Any:
        """A new, unconnected connection with the engine's timeouts. ``counted=False``: one
        the pool never gets back (the tracking listener's own), so not counted against
        redis-py's ``max_connections`` (100 by default in redis-py 8): else every reconnect
        would use one up for good, and a forked child inherits the count."""
        config, pool = get_config(), self.pool
        if counted:
            conn = pool.make_connection()
        else:
            conn = pool.connection_class(**pool.connection_kwargs)
        conn.socket_timeout = config["SOCKET_TIMEOUT"]
        conn.socket_connect_timeout = config["CONNECT_TIMEOUT"]
        conn.retry = Retry(NoBackoff(), 0)
        return conn

    def get_connection(self, command_name: Any = None, *keys: Any, **options: Any) -> Any:
        if self.breaker.dirty:
            self.breaker.check()
        if self._pid != os.getpid():  # forked: never touch the parent's sockets
            self._free, self.kept, self._pid, self._probe_conn = [], [], os.getpid(), None
        try:
            conn = self._free.pop()
        except IndexError:
            conn = self.make_connection()
        else:
            if _server_closed(conn):
                conn.disconnect()
        try:
            # As redis-py's pools do: a Sentinel-managed connection asks the
            # sentinels for the primary only in connect(), never on send.
            if getattr(conn, "_sock", None) is None:
                conn.connect()
        except BaseException:
            self._free.append(conn)
            raise
        if _slow.get():
            _set_read_timeout(conn, get_config()["SLOW_COMMAND_TIMEOUT"])
        return conn

    def release(self, conn: Any) -> None:
        wanted = get_config()["SOCKET_TIMEOUT"]
        if conn.socket_timeout != wanted:
            _set_read_timeout(conn, wanted)
        if self._pid == os.getpid():
            self._free.append(conn)

    def disconnect(self, inuse_connections: bool = True) -> None:
        for conn in list(self._free):
            conn.disconnect()

    def ping(self) -> None:
        """The breaker's probe: PING on a connection of its own, past the breaker."""
        conn = self._probe_conn
        if conn is None or self._pid != os.getpid():
            conn = self._probe_conn = self.make_connection()
        try:
            if getattr(conn, "_sock", None) is None:
                conn.connect()
            conn.send_command("PING")
            conn.read_response()
        except BaseException:
            conn.disconnect()
            raise


# A kept connection idle for longer than this is looked at before use
# (``_server_closed``, ~1 us); one used more recently is not. Redis closes idle
# connections after its ``timeout`` (seconds); a restart keeps Redis away longer
# than this, so every connection from before it sat idle through it (one used
# during it failed and was dropped).
IDLE_CHECK_SECONDS = 0.01


def readable(sock: Any) -> bool:
    """Whether ``sock`` has bytes or an EOF to read now (``poll``: any descriptor
    number; Windows has no ``poll``, and its ``select`` has no such limit)."""
    if not hasattr(select, "poll"):
        return bool(select.select([sock], [], [], 0)[0])
    poller = select.poll()
    poller.register(sock, select.POLLIN)
    return bool(poller.poll(0))


def _server_closed(conn: Any) -> bool:
    """Whether Redis closed this idle connection (its idle ``timeout``, a restart,
    CLIENT KILL) or sent it bytes nobody asked for: it is readable, unasked."""
    sock = getattr(conn, "_sock", None)
    return sock is not None and readable(sock)


_pools: dict[int, tuple[Any, int, EnginePool]] = {}


def engine_client(client: Any, alias: str) -> Any:
    """A copy of the redis-py client ``client`` that runs on an ``EnginePool``."""
    pool = client.connection_pool
    entry = _pools.get(id(pool))
    if entry is None or entry[0] is not pool or entry[1] != os.getpid():
        entry = _pools[id(pool)] = (pool, os.getpid(), EnginePool(pool, alias))
    engine = copy.copy(client)
    engine.connection_pool = entry[2]
    return engine


@functools.lru_cache(maxsize=8)
def _wait_command(replicas: int, timeout_ms: int) -> bytes:
    return header(3, "WAIT") + arguments(str(replicas), str(timeout_ms))


def wait_command() -> tuple[bytes, int]:
    """(``WAIT n ms`` as RESP bytes, n) for durable writes; (b"", 0) when off.

    conf.get_config has checked that the wait is shorter than SOCKET_TIMEOUT.
    """
    config = get_config()
    replicas = config["WRITE_REPLICAS"]
    if replicas <= 0:
        return b"", 0
    return _wait_command(replicas, max(1, round(config["WRITE_REPLICAS_TIMEOUT_MS"]))), replicas


def replica_shortfall(alias: str, acked: int, replicas: int) -> WriteNotReplicated:
    """The error of a durable write that only ``acked`` of ``replicas`` acknowledged."""
    return WriteNotReplicated(
        f"Redis ({alias!r}) applied the write, but only {acked} of "
        f"{replicas} replica(s) acknowledged it in time (WRITE_REPLICAS): "
        "a failover could lose it"
    )


# socket.sendall's timeout bounds a whole call: a big batch goes in pieces, each
# with the full SOCKET_TIMEOUT (Redis reads ~100 MB/s of BITFIELD commands).
SEND_PIECE_BYTES = 1 << 20


def payload_pieces(payload: bytes) -> list[Any]:
    if len(payload) <= SEND_PIECE_BYTES:
        return [payload]
    view = memoryview(payload)
    return [view[i : i + SEND_PIECE_BYTES] for i in range(0, len(payload), SEND_PIECE_BYTES)]


def _streamed(parts: Iterable[bytes], wait: bytes) -> Iterator[Any]:
    """Pieces of each part as the part is made, then ``wait`` (redis-py sends an
    iterable's items one by one, so Redis starts on a part while the next is made)."""
    for part in parts:
        yield from payload_pieces(part)
    if wait:
        yield wait


def read_response(conn: Any) -> Any:
    return conn.read_response()


class EngineConnection:
    """All Redis access of one cache alias: the thin adapter the storage layer uses."""

    def __init__(self, alias: str):
        self.alias = alias
        self._client: Any = None
        self._client_pid = 0
        self.breaker = breaker_for(alias)  # connection failures of this alias (breaker.py)

    @property
    def client(self):
        """The alias's redis-py client (cache_client.py) on the engine's connections,
        looked up once per process (it is thread-safe)."""
        if self._client is not None and self._client_pid == os.getpid():
            return self._client
        self._client, self._client_pid = engine_client(self.redis_client(), self.alias), os.getpid()
        return self._client

    def redis_client(self) -> Any:
        """The redis-py client whose settings the engine's connections copy."""
        return redis_client(self.alias)

    def ping(self) -> None:
        """The circuit breaker's probe: PING, whatever the breaker's state."""
        self.client.connection_pool.ping()

    def refresh(self, force: bool = False) -> None:
        """Re-read a cluster's slot map: nothing to do on one server."""

    def route(self, key: str) -> Any:
        """Which connection a command on ``key`` goes to: one server, always the same."""
        return None

    def send_groups(self, sends: Sequence[tuple[Any, bytes, Any]], durable: bool = False) -> list:
        """``(route, payload, read)`` per server: one server here, so one ``send``."""
        return [self.send(payload, read, durable) for _route, payload, read in sends]

    @guarded
    def send(
        self, payload: bytes | Iterable[bytes], read: Any, durable: bool = False, key: str = ""
    ) -> Any:
        """One round trip on a kept connection (``write``, then ``receive``: any
        error drops the connection, so no half-read reply is left for the next user).

        ``payload`` is the commands as bytes, or an iterable of them: each part
        is sent as soon as the iterable yields it, so Redis runs the first
        commands while the caller hashes and packs the next (no reply is read
        before the last part is sent: still one round trip).

        ``durable`` (writes): with WRITE_REPLICAS set, ``WAIT`` follows the
        command in the same round trip and a shortfall raises WriteNotReplicated,
        which carries ``read``'s result (its ``replies``).
        """
        wait, replicas = wait_command() if durable else (b"", 0)
        conn = self.borrow()
        try:
            self.write(conn, payload, wait)
            result, acked = self.receive(conn, read, replicas)
        except (*CONNECTION_ERRORS, ReplyError, redis_errors.RedisError) as exc:
            raise redis_failure(self.alias, exc) from exc
        if acked < replicas:
            short = replica_shortfall(self.alias, acked, replicas)
            short.replies = result  # read first by the caller (``Storage._replied``)
            raise short
        return result

    def write(self, conn: Any, payload: bytes | Iterable[bytes], wait: bytes = b"") -> None:
        """Send ``payload`` (``send``), then ``wait``, on a borrowed connection; on any
        error the connection is dropped (a half-sent command) and given back."""
        try:
            if isinstance(payload, bytes):
                pieces = payload_pieces(payload)
                conn.send_packed_command([*pieces, wait] if wait else pieces)
            else:  # one send, its parts made while the earlier ones are sent
                conn.send_packed_command(_streamed(payload, wait))
        except BaseException:
            conn.disconnect()
            self.give_back(conn)
            raise

    def receive(self, conn: Any, read: Any, replicas: int = 0) -> tuple[Any, int]:
        """``read``'s result on a written connection and, when ``replicas``, WAIT's
        count (else 0); then the connection goes back to the kept list, dropped
        first on any error (no half-read reply is left for the next user)."""
        try:
            return read(conn), (conn.read_response() if replicas else 0)
        except BaseException:
            conn.disconnect()
            raise
        finally:
            self.give_back(conn)

    def give_back(self, conn: Any) -> None:
        """Return a borrowed hot-path connection to this process's kept list."""
        self.client.connection_pool.kept.append((conn, time.monotonic()))

    def client_for(self, key: str) -> Any:
        """The client for commands on ``key``: one server, the same client."""
        return self.client

    def borrow(self):
        """A connected hot-path connection from this process's kept list for the alias's
        pool (``EnginePool.kept``: ``client`` and ``engine_client`` make a new pool in
        a forked child, which so never touches the parent's sockets). One that Redis
        closed while it sat idle is reconnected before use, never written to
        (``IDLE_CHECK_SECONDS``). Connect explicitly: redis-py 8 reconnects on send
        without asking Sentinel."""
        pool = self.client.connection_pool
        kept = pool.kept
        try:
            conn, since = kept.pop()
        except IndexError:
            conn = None
        try:
            if conn is None:
                return pool.get_connection()
            if time.monotonic() - since > IDLE_CHECK_SECONDS and _server_closed(conn):
                conn.disconnect()
            if getattr(conn, "_sock", None) is None:
                conn.connect()
            return conn
        except CONNECTION_ERRORS as exc:
            if conn is not None:
                kept.append((conn, since))
            raise redis_failure(self.alias, exc) from exc

    @guarded
    def call(self, *args: Any) -> Any:
        with mapped_errors(self.alias):
            return self.client.execute_command(*args)

    @guarded
    def eval(self, script: str, keys: Sequence[str], args: Sequence[Any]) -> Any:
        with mapped_errors(self.alias):
            return self.client.eval(script, len(keys), *keys, *args)

    def mapped(self) -> Any:
        """Pipelines and client helpers: the same error mapping as ``call``."""
        return mapped_errors(self.alias)
