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

``EnginePool`` stands in for the django-redis pool behind a copy of the
django-redis client, so ``execute_command``, ``eval`` and pipelines run on
these connections; the hot path keeps the ones it borrows (storage._kept).
"""

from __future__ import annotations

import contextvars
import copy
import functools
import os
from collections.abc import Callable
from typing import Any

from redis.backoff import NoBackoff
from redis.retry import Retry

from django_bloom.breaker import breaker_for
from django_bloom.conf import get_config
from django_bloom.packing import arguments, header

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
    """The engine's connections to one django-redis pool's server (see module doc).

    Everything but getting and releasing connections is the wrapped pool's
    (encoder, connection_kwargs, protocol...).
    """

    def __init__(self, pool: Any, alias: str):
        self.pool = pool
        self.alias = alias
        self.breaker = breaker_for(alias)
        self._free: list[Any] = []
        self._pid = os.getpid()
        self._probe_conn: Any = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self.pool, name)

    def make_connection(self) -> Any:
        """A new, unconnected connection with the engine's timeouts."""
        config = get_config()
        conn = self.pool.make_connection()
        conn.socket_timeout = config["SOCKET_TIMEOUT"]
        conn.socket_connect_timeout = config["CONNECT_TIMEOUT"]
        conn.retry = Retry(NoBackoff(), 0)
        return conn

    def get_connection(self, command_name: Any = None, *keys: Any, **options: Any) -> Any:
        if self.breaker.dirty:
            self.breaker.check()
        if self._pid != os.getpid():  # forked: never touch the parent's sockets
            self._free, self._pid, self._probe_conn = [], os.getpid(), None
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


def _server_closed(conn: Any) -> bool:
    """Whether an idle connection was closed by the server (or holds stray data)."""
    if getattr(conn, "_sock", None) is None:
        return False
    try:
        return bool(conn.can_read())
    except Exception:
        return True


_pools: dict[int, tuple[Any, int, EnginePool]] = {}


def engine_client(client: Any, alias: str) -> Any:
    """A copy of the django-redis client ``client`` that runs on an ``EnginePool``."""
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
