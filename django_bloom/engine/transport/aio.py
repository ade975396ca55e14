"""The engine's asyncio connections: plans (engine/plans.py) run on an event loop.

The async API of ``Filter`` (``acontains`` ...) sends the same bytes as the sync
hot path, on redis-py's asyncio connections (``redis.asyncio``) to the server
the cache alias names. Where that server is comes from the sync side: the
alias's redis-py client (cache_client.py: django-redis or Django's RedisCache)
and its pool's connection class and keyword arguments (host, port, db,
username/password or credential provider, TLS files and checks, RESP
protocol). Nothing is parsed twice. Only these classes have an asyncio twin
here: ``Connection`` (TCP), ``SSLConnection`` (TLS) and
``UnixDomainSocketConnection``. Any other (Sentinel-managed, a client-side
caching proxy, a custom class) gets no async transport (``transport_for``
returns None) and the async API runs the sync call in a worker thread.

The same guarantees as connections.py:

- ``SOCKET_TIMEOUT`` bounds every read and ``CONNECT_TIMEOUT`` the connect
  (redis-py's asyncio connections apply them as asyncio timeouts), no retries;
- the same per-alias circuit breaker (breaker.py): checked before, fed after;
  its background probe is the sync PING of connections.py. One difference: an
  asyncio timeout also counts the time the event loop spends elsewhere, so a
  timeout that fires while Redis's reply already waits in the buffer (a loop
  blocked or starved of CPU) reads the reply after all (hiredis's parser), or
  raises ``LoopTooBusy``, which the breaker does not count;
- the same error mapping (``redis_failure``); any error or cancellation in
  the middle of a round trip drops the connection (no half-read reply is left
  for the next user);
- ``WRITE_REPLICAS``: the same ``WAIT`` after durable writes.

Connections are per event loop (an asyncio connection belongs to the loop that
opened it: ASGI servers and tests run several loops) and per process, kept in
a LIFO list like the sync hot path's; at most ``MAX_CONNECTIONS_PER_LOOP`` are
in use at once per alias and loop, further callers wait for one (a burst of 200
requests does not open 200 connections within one connect timeout).
"""

from __future__ import annotations

import asyncio
import inspect
import os
import threading
import time
from typing import Any

from redis import connection as sync_connection
from redis import exceptions as redis_errors
from redis._parsers.hiredis import _AsyncHiredisParser
from redis.asyncio import connection as aio_connection
from redis.asyncio.connection import async_timeout

from django_bloom.conf import forget_on_change, get_config
from django_bloom.engine.scripts import DROP_STRAY
from django_bloom.engine.transport.breaker import breaker_for
from django_bloom.engine.transport.cache_client import redis_client
from django_bloom.engine.transport.cluster import cluster_url
from django_bloom.engine.transport.connections import (
    IDLE_CHECK_SECONDS,
    EngineConnection,
    payload_pieces,
    readable,
    replica_shortfall,
    wait_command,
)
from django_bloom.engine.transport.errors import CONNECTION_ERRORS, redis_failure
from django_bloom.engine.transport.packing import ReplyError, header
from django_bloom.exceptions import (
    BloomError,
    FilterKeyMissing,
    RedisUnreachable,
    WriteNotReplicated,
)

# Connections in use at once per alias and loop; further callers wait for one. One
# filter operation costs Redis ~0.05-0.1 ms, so a few in flight keep a (single-threaded)
# Redis busy; more only means more connects at once in a burst, each of which must
# finish within CONNECT_TIMEOUT (0.2 s) or count as a failure for the breaker.
MAX_CONNECTIONS_PER_LOOP = 16

# The sync connection class -> its asyncio twin. Exact classes only: a subclass
# may change how it connects (Sentinel discovery), which its twin would not.
_TWINS: dict[type, type] = {
    sync_connection.Connection: aio_connection.Connection,
    sync_connection.SSLConnection: aio_connection.SSLConnection,
    sync_connection.UnixDomainSocketConnection: aio_connection.UnixDomainSocketConnection,
}
# Keyword arguments that are sync objects, or that the engine sets itself.
_NOT_COPIED = {
    "parser_class",
    "retry",
    "retry_on_error",
    "retry_on_timeout",
    "event_dispatcher",
    "redis_connect_func",
    "encoder_class",
    "maint_notifications_config",
    "maint_notifications_pool_handler",
    "socket_timeout",
    "socket_connect_timeout",
    "health_check_interval",
    "connection_class",
}


def _accepted(cls: type) -> set[str]:
    """Keyword arguments the asyncio class's ``__init__`` chain names."""
    names: set[str] = set()
    for klass in cls.__mro__:
        init = klass.__dict__.get("__init__")
        if init is None:
            continue
        names |= {
            p.name
            for p in inspect.signature(init).parameters.values()
            if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD) and p.name != "self"
        }
    return names


def connection_spec(alias: str) -> tuple[type, dict[str, Any]] | None:
    """(asyncio connection class, its keyword arguments) for the alias's server, or
    None when its connection class has no asyncio twin here (see module doc)."""
    pool = redis_client(alias).connection_pool  # the cache's pool (cache_client.py)
    twin = _TWINS.get(getattr(pool, "connection_class", None))
    if twin is None:
        return None
    accepted = _accepted(twin)
    given = pool.connection_kwargs
    unsupported = [n for n, v in given.items() if v and n.startswith("ssl") and n not in accepted]
    if unsupported:
        return None  # a TLS check the asyncio class cannot make (OCSP...): never drop it
    kwargs = {
        name: value for name, value in given.items() if name in accepted and name not in _NOT_COPIED
    }
    return twin, kwargs


class AsyncPool:
    """One alias's asyncio connections on one event loop (see module doc)."""

    def __init__(self, alias: str, cls: type, kwargs: dict[str, Any]):
        self.alias = alias
        self.cls = cls
        self.kwargs = kwargs
        self.free: list[Any] = []
        self.slots = asyncio.Semaphore(MAX_CONNECTIONS_PER_LOOP)

    def make_connection(self) -> Any:
        config = get_config()
        return self.cls(
            **self.kwargs,
            socket_timeout=config["SOCKET_TIMEOUT"],
            socket_connect_timeout=config["CONNECT_TIMEOUT"],
            retry=None,
        )

    async def borrow(self) -> Any:
        try:
            conn, since = self.free.pop()
        except IndexError:
            conn, since = self.make_connection(), None
        try:
            idle = since is not None and time.monotonic() - since > IDLE_CHECK_SECONDS
            if idle and conn.is_connected and _server_closed(conn):
                await _drop(conn)
            if not conn.is_connected:
                await conn.connect()
        except BaseException:
            await _drop(conn)
            raise
        return conn


class LoopTooBusy(RedisUnreachable):
    """An asyncio timeout fired although Redis's reply had arrived: the event loop did
    not run in time (asyncio timeouts count the time the loop is busy elsewhere, socket
    timeouts do not). The call fails as a timeout would, but the breaker, which tracks
    Redis's health, does not count it."""

    breaker_counts = False


def _reply_waiting(conn: Any) -> bool:
    """Whether bytes from Redis sit unread in the connection's stream buffer."""
    reader = getattr(conn, "_reader", None)
    return bool(getattr(reader, "_buffer", None))


def _server_closed(conn: Any) -> bool:
    """Whether Redis closed this idle connection (an idle ``timeout``, a restart,
    CLIENT KILL) or sent it bytes nobody asked for: seen by the loop already, or still
    waiting on the socket (a loop that has not run since, as between two
    ``run_until_complete``). ``select`` only looks: the loop's reader still gets it."""
    if conn._reader.at_eof() or _reply_waiting(conn) or conn._writer.is_closing():
        return True
    sock = conn._writer.get_extra_info("socket")
    return sock is not None and readable(sock)


async def _read(conn: Any) -> Any:
    """One reply. redis-py must not disconnect on a timeout: a timeout that fired while
    the reply already waited in the buffer (the loop was late, not Redis) is read again
    when the parser is hiredis's, which loses nothing when cancelled (it only awaits
    stream reads, before consuming); otherwise the caller raises ``LoopTooBusy``."""
    try:
        return await conn.read_response(disconnect_on_error=False)
    except redis_errors.TimeoutError:
        if not (_reply_waiting(conn) and isinstance(conn._parser, _AsyncHiredisParser)):
            raise
    return await conn.read_response(disconnect_on_error=False)


async def _write(conn: Any, pieces: list[Any], timeout: Any = "socket") -> None:
    """Send on the connection's stream, within ``SOCKET_TIMEOUT`` (``timeout=None``: no
    limit of its own, ``_exchange_large``). redis-py's ``send_packed_command`` wraps every
    write in ``asyncio.wait_for`` (a task per call on Python < 3.12); a command the socket
    takes at once (the buffer is empty afterwards) needs no wait at all."""
    writer = getattr(conn, "_writer", None)
    if writer is None:
        await conn.send_packed_command(pieces, check_health=False)
        return
    writer.writelines(pieces)
    if writer.transport.get_write_buffer_size():
        if timeout is None:
            await writer.drain()
            return
        try:
            async with async_timeout(conn.socket_timeout):
                await writer.drain()
        except asyncio.TimeoutError:
            raise redis_errors.TimeoutError("Timeout writing to socket") from None


async def _exchange_large(conn: Any, pieces: list[Any], wait: bytes, count: int) -> Any:
    """A payload of several pieces (``connections.pieces``): written piece by piece
    while another task reads the replies as Redis sends them (still one round trip).
    ``SOCKET_TIMEOUT`` so bounds progress, each reply, not the whole batch, which Redis
    may take seconds to read (as the sync path's timeout is per piece). A reader that
    fails (Redis frozen) stops the writer. Returns (replies, WAIT's count or 0)."""

    async def read_all() -> Any:
        replies = [await _read(conn) for _ in range(count)]
        return replies, (await _read(conn) if wait else 0)

    async def write_all() -> None:
        for piece in pieces:
            await _write(conn, [piece], timeout=None)  # the reader's timeouts bound it
        if wait:
            await _write(conn, [wait], timeout=None)

    reading = asyncio.ensure_future(read_all())
    writing = asyncio.ensure_future(write_all())
    try:
        await asyncio.wait((reading, writing), return_when=asyncio.FIRST_EXCEPTION)
        for task in (reading, writing):
            if task.done() and task.exception() is not None:
                raise task.exception()  # type: ignore[misc]
        return reading.result()
    finally:
        for task in (reading, writing):
            task.cancel()
        await asyncio.gather(reading, writing, return_exceptions=True)


async def _drop(conn: Any) -> None:
    """Close a connection without waiting for the server (it may be frozen)."""
    try:
        await conn.disconnect(nowait=True)
    except Exception:  # already broken: nothing more to close
        pass


# id(loop) -> (loop, pid, {alias: AsyncPool}). Not a WeakKeyDictionary: the pools'
# connections refer to their loop, so its key would never die. Instead, each new
# loop drops the pools of loops that are closed (asyncio.run, async_to_sync under
# WSGI: a loop per request), and garbage collection closes their sockets.
_pools: dict[int, tuple[asyncio.AbstractEventLoop, int, dict[str, AsyncPool]]] = {}
_specs: dict[str, tuple[type, dict[str, Any]] | None] = {}
_lock = threading.Lock()


def forget_async_pools() -> None:
    """Settings changed (CACHES, DJANGO_BLOOM): look the servers up again."""
    with _lock:
        _specs.clear()
        _pools.clear()


forget_on_change(forget_async_pools, caches=True)


def _pool(alias: str) -> AsyncPool | None:
    """The running loop's pool for ``alias`` (None: no asyncio transport for it)."""
    loop = asyncio.get_running_loop()
    entry = _pools.get(id(loop))
    if entry is None or entry[0] is not loop or entry[1] != os.getpid():
        with _lock:
            for key, (other, _pid, _by_alias) in list(_pools.items()):
                if other.is_closed():
                    del _pools[key]
            entry = _pools[id(loop)] = (loop, os.getpid(), {})
    pool = entry[2].get(alias)
    if pool is None:
        if cluster_url(alias):  # Redis Cluster: slot routing is the sync engine's (cluster.py)
            return None
        if alias not in _specs:
            _specs[alias] = connection_spec(alias)
        spec = _specs[alias]
        if spec is None:
            return None
        pool = entry[2][alias] = AsyncPool(alias, *spec)
    return pool


class AsyncEngineConnection:
    """The asyncio door to one alias's Redis: runs plans, one round trip each."""

    def __init__(self, alias: str):
        self.alias = alias
        self.breaker = breaker_for(alias)  # the sync path's breaker: one per alias
        self._sync = EngineConnection(alias)

    def available(self) -> bool:
        """Whether this alias has an asyncio transport (else: run the sync call in a thread).
        Only inside a running event loop."""
        return _pool(self.alias) is not None

    async def run(self, plan: Any) -> Any:
        """Send a plan's commands, read its replies, return its result."""
        replies, short = await self.send(plan.payload, plan.replies, plan.durable)
        try:
            return plan.settle(replies, short)
        except FilterKeyMissing as exc:
            stray = getattr(exc, "stray_key", None)  # plans.StrayKey
            if stray:
                await self._drop_stray(stray)
            raise

    async def send(
        self, payload: bytes, count: int, durable: bool = False
    ) -> tuple[list[Any], WriteNotReplicated | None]:
        """One round trip through the breaker: ``count`` replies (an error reply raises),
        and a durable write's WAIT shortfall, raised after them (``Plan.settle``)."""
        breaker = self.breaker
        if breaker.dirty:
            breaker.check()
        try:
            result = await self._send(payload, count, durable)
        except RedisUnreachable as exc:
            breaker.failed(exc, self._sync.ping)
            raise
        if breaker.dirty:
            breaker.succeeded()
        return result

    async def _send(self, payload: bytes, count: int, durable: bool) -> tuple[list[Any], Any]:
        pool = _pool(self.alias)
        if pool is None:
            raise BloomError(f"cache alias {self.alias!r} has no asyncio transport")
        wait, replicas = wait_command() if durable else (b"", 0)
        async with pool.slots:
            if self.breaker.dirty:  # it may have opened while this call waited for a slot
                self.breaker.check()
            try:
                conn = await pool.borrow()
            except (*CONNECTION_ERRORS, redis_errors.RedisError) as exc:
                raise redis_failure(self.alias, exc) from exc
            try:
                pieces = payload_pieces(payload)
                if len(pieces) > 1:  # a large batch: replies read while it is written
                    replies, acked = await _exchange_large(conn, pieces, wait, count)
                else:
                    await _write(conn, [*pieces, wait] if replicas else pieces)
                    replies = [await _read(conn) for _ in range(count)]
                    acked = await _read(conn) if replicas else 0
            except (*CONNECTION_ERRORS, ReplyError, redis_errors.RedisError) as exc:
                answered = _reply_waiting(conn)
                await _drop(conn)
                failure = redis_failure(self.alias, exc)
                if answered and isinstance(failure, RedisUnreachable):
                    raise LoopTooBusy(
                        f"Redis ({self.alias!r}) answered, but this event loop was too busy "
                        "to read the reply within SOCKET_TIMEOUT (a blocking call in the "
                        "loop, or an overloaded machine); not counted by the circuit breaker"
                    ) from exc
                raise failure from exc
            except BaseException:  # cancelled mid-read: the reply would be the next user's
                await _drop(conn)
                raise
            pool.free.append((conn, time.monotonic()))
        short = replica_shortfall(self.alias, acked, replicas) if acked < replicas else None
        return replies, short

    async def _drop_stray(self, key: str) -> None:
        payload = header(4, "EVAL", DROP_STRAY, "1", key)
        try:
            await self.send(payload, 1)
        except BloomError:  # the key stays invalid (fingerprint 0): never "healthy"
            pass
