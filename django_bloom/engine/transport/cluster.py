"""Redis Cluster for the filter engine: slot routing over per-node kept connections.

django-redis has no cluster client (jazzband/django-redis #208, #606), so a
cluster is named in ``DJANGO_BLOOM["CLUSTERS"]`` (``{"name": "redis://host:port"}``,
any node as the seed) and a filter created with ``cache_alias="name"`` talks to
it through ``ClusterConnection`` instead of ``connections.EngineConnection``.

- Topology: redis-py's ``RedisCluster`` (one per process) knows the slot map
  (``get_node_from_key``) and refreshes it (``nodes_manager.initialize``). It
  runs no filter command itself.
- Commands: every node gets a ``NodeConnection``, an ``EngineConnection`` on a
  plain ``redis.Redis`` for that node: the engine's timeouts (0.2 s,
  ``SLOW_COMMAND_TIMEOUT`` for ``@slow``), no retries, kept hot-path
  connections, and a circuit breaker of its own (``<name>@host:port``): a dead
  node fails its calls at once after the first timeout; the others go on.
- A batch over several segments (``send_groups``) is WRITTEN to every node
  before any reply is read: one round trip's latency, whatever the node count.
- ``MOVED`` (a slot moved: resharding or a failover): the slot map is
  refreshed and the command retried once on the new owner. ``ASK`` (a slot
  migrating): the command is sent once more to the target, after ``ASKING``.
  A node that stops answering also refreshes the map (at most once a second),
  so a promoted replica is found; once its breaker is open, the breaker's probe
  does (in its own thread): a refused call never waits for the map.

All of a segment's keys (bits, build, journal, lock, counters) share one hash
tag (``format.filter_keys``), so each Lua script runs on one node.
"""

from __future__ import annotations

import functools
import os
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import redis
from redis import exceptions as redis_errors
from redis.backoff import NoBackoff
from redis.connection import parse_url
from redis.retry import Retry

from django_bloom.conf import get_config
from django_bloom.engine.transport.breaker import breaker_for
from django_bloom.engine.transport.connections import (
    EngineConnection,
    replica_shortfall,
    wait_command,
)
from django_bloom.engine.transport.errors import (
    CONNECTION_ERRORS,
    Redirect,
    mapped_errors,
    redirect_of,
    redis_failure,
)
from django_bloom.engine.transport.packing import ReplyError, header
from django_bloom.exceptions import (
    BloomError,
    CircuitOpen,
    RedisUnreachable,
    WriteNotReplicated,
)

ASKING = header(1, "ASKING")
ASKING_OK = b"+OK\r\n"
REFRESH_MIN_SECONDS = 1.0


def cluster_url(alias: str) -> str | None:
    """The seed URL of the cluster named ``alias`` in ``CLUSTERS``, or None."""
    url = get_config()["CLUSTERS"].get(alias)
    return str(url) if url else None


def _redirected(method: Callable) -> Callable:
    """``method`` of ``EngineConnection``, its MOVED or ASK reply raised as a ``Redirect``."""

    @functools.wraps(method)
    def call(self: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return method(self, *args, **kwargs)
        except BloomError as exc:
            redirect = redirect_of(exc.__cause__ or exc)
            if redirect is None:
                raise  # as it was, with its own cause (a timeout opens breakers at once)
            raise redirect from exc

    return call


class NodeConnection(EngineConnection):
    """``EngineConnection`` on one cluster node: its own client, pool and breaker."""

    def __init__(self, alias: str, kwargs: dict[str, Any], refresh: Any = None):
        super().__init__(f"{alias}@{kwargs['host']}:{kwargs['port']}")
        self.kwargs = kwargs
        self._refresh_map = refresh  # the cluster's slot map re-read (ClusterConnection.refresh)

    def ping(self) -> None:
        """The node breaker's probe (its own thread): the slot map re-read first, so a
        replica promoted meanwhile gets this node's slots, then PING this node."""
        if self._refresh_map is not None:
            try:
                self._refresh_map(force=True)
            except RedisUnreachable:
                pass
        super().ping()

    def redis_client(self) -> Any:
        """A plain client of this node (the seed's credentials and TLS)."""
        return redis.Redis(**self.kwargs)

    # A MOVED or ASK reply raised as a ``Redirect`` (ClusterConnection follows it).
    send = _redirected(EngineConnection.send)
    call = _redirected(EngineConnection.call)
    eval = _redirected(EngineConnection.eval)


class ClusterConnection:
    """All Redis access of one cluster alias (the interface of ``EngineConnection``)."""

    def __init__(self, alias: str, url: str):
        self.alias = alias
        self.url = url
        self.breaker = breaker_for(alias)  # the slow-path guard of Storage (count_bits...)
        self._topology: Any = None
        self._pid = 0
        self._nodes: dict[tuple[str, int], NodeConnection] = {}
        self._refreshed_at = float("-inf")
        self._lock = threading.Lock()

    # -- topology ---------------------------------------------------------------
    @property
    def topology(self) -> Any:
        """This process's ``RedisCluster``: the slot map (it runs no filter command)."""
        if self._topology is not None and self._pid == os.getpid():
            return self._topology
        with self._lock:
            if self._topology is None or self._pid != os.getpid():
                config = get_config()
                try:
                    self._topology = redis.RedisCluster.from_url(
                        self.url,
                        socket_timeout=config["SOCKET_TIMEOUT"],
                        socket_connect_timeout=config["CONNECT_TIMEOUT"],
                        retry=Retry(NoBackoff(), 0),
                    )
                except (*CONNECTION_ERRORS, redis_errors.RedisError) as exc:
                    raise RedisUnreachable(
                        f"Redis Cluster ({self.alias!r}) is unreachable: {exc}"
                    ) from exc
                self._pid, self._nodes = os.getpid(), {}
        return self._topology

    def refresh(self, force: bool = False) -> None:
        """Re-read the slot map (after MOVED at once; after a dead node at most once a second)."""
        now = time.monotonic()
        if not force and now - self._refreshed_at < REFRESH_MIN_SECONDS:
            return
        self._refreshed_at = now
        try:
            self.topology.nodes_manager.initialize()
        except (*CONNECTION_ERRORS, redis_errors.RedisError) as exc:
            raise RedisUnreachable(f"Redis Cluster ({self.alias!r}) is unreachable: {exc}") from exc

    def node(self, address: tuple[str, int]) -> NodeConnection:
        conn = self._nodes.get(address)
        if conn is None:
            kwargs = parse_url(self.url)  # credentials and TLS of the seed, this node's address
            kwargs.update(host=address[0], port=address[1])
            conn = self._nodes.setdefault(address, NodeConnection(self.alias, kwargs, self.refresh))
        return conn

    def route(self, key: str) -> tuple[str, int]:
        """The (host, port) of the primary owning ``key``'s slot."""
        try:
            owner = self.topology.get_node_from_key(key)
        except redis_errors.SlotNotCoveredError as exc:
            self.refresh()
            raise RedisUnreachable(f"Redis Cluster ({self.alias!r}): {exc}") from exc
        return (owner.host, int(owner.port))

    def node_for(self, key: str) -> NodeConnection:
        return self.node(self.route(key))

    def _any_node(self) -> NodeConnection:
        primary = self.topology.get_primaries()[0]
        return self.node((primary.host, int(primary.port)))

    @property
    def client(self) -> Any:
        """A plain client of one primary (commands without a key: PING, CONFIG)."""
        return self._any_node().client

    def client_for(self, key: str) -> Any:
        """The engine's client of the node owning ``key`` (pipelines on one hash tag)."""
        return self.node_for(key).client

    def ping(self) -> None:
        """The alias breaker's probe: the slot map re-read, then PING every primary."""
        self.refresh(force=True)
        for primary in self.topology.get_primaries():
            self.node((primary.host, int(primary.port))).client.connection_pool.ping()

    # -- commands ---------------------------------------------------------------
    def _routed(self, key: str, run: Any) -> Any:
        """``run(node_connection, asking)`` on the owner of ``key``; once more after
        MOVED (slot map refreshed) or ASK (on the target, after ASKING)."""
        try:
            return run(self.node_for(key), False)
        except Redirect as moved:
            if moved.ask and moved.node is not None:
                return run(self.node(moved.node), True)
            self.refresh(force=True)
            return run(self.node_for(key), False)
        except CircuitOpen:
            raise  # a node known down: its breaker's probe re-reads the map, not the request
        except RedisUnreachable:
            try:
                self.refresh()  # a failover may have promoted a replica
            except RedisUnreachable:
                pass
            raise

    def send(self, payload: bytes, read: Any, durable: bool = False, key: str = "") -> Any:
        def run(node: NodeConnection, asking: bool) -> Any:
            if not asking:
                return node.send(payload, read, durable, key)
            return node.send(ASKING + payload, _after_asking(read), durable, key)

        return self._routed(key, run)

    def send_groups(self, sends: Sequence[tuple[Any, bytes, Any]], durable: bool = False) -> list:
        """Every node's commands written before any reply is read: one round trip.

        A node that answers MOVED gets its commands again after the slot map is
        refreshed (writes there report was-new as a repeat would: only while slots
        migrate). ASK is raised (after every node's replies are read, as any other
        failure) for Storage to re-send segment by segment: ASKING covers one command.
        A WAIT shortfall is raised last, carrying every node's result (one send: its own).
        """
        if len(sends) == 1:
            _route, payload, read = sends[0]
            return [self._send_to(sends[0][0], payload, read, durable)]
        wait, replicas = wait_command() if durable else (b"", 0)
        started, short = [], None  # a node's WAIT shortfall: raised last, with every node's result
        for address, payload, read in sends:
            node = self.node(address)
            try:
                if node.breaker.dirty:
                    node.breaker.check()  # CircuitOpen: this node fails at once
                conn = node.borrow()
                node.write(conn, payload, wait)  # a half-sent command drops the connection
            except (*CONNECTION_ERRORS, BloomError) as exc:
                error = exc if isinstance(exc, BloomError) else redis_failure(node.alias, exc)
                if isinstance(error, RedisUnreachable):
                    node.breaker.failed(error, node.ping)
                started.append((node, None, read, payload, address, error))
                continue
            started.append((node, conn, read, payload, address, None))
        results: list[Any] = []
        failure: BaseException | None = None
        moved = False  # the slot map was re-read after a MOVED in this batch
        for node, conn, read, payload, address, error in started:
            if conn is not None:
                try:
                    result, acked = node.receive(conn, read, replicas)
                    if acked < replicas:  # applied: its result is kept
                        short = short or replica_shortfall(node.alias, acked, replicas)
                    elif node.breaker.dirty:
                        node.breaker.succeeded()
                except (*CONNECTION_ERRORS, ReplyError, redis_errors.RedisError) as exc:
                    error = redirect_of(exc) or redis_failure(node.alias, exc)
                    if isinstance(error, RedisUnreachable):
                        node.breaker.failed(error, node.ping)
            if isinstance(error, Redirect) and error.ask:
                failure = failure or error  # storage re-sends segment by segment (ASKING each)
                result = None
            elif isinstance(error, Redirect):
                try:  # the slot map is re-read once per batch, however many nodes moved
                    result = self._send_to(address, payload, read, durable, error, moved)
                    moved = True
                except WriteNotReplicated as exc:  # re-sent and applied there
                    result, short, moved = exc.replies, short or exc, True
                except BloomError as exc:
                    failure = failure or exc
                    result = None
            elif error is not None:
                failure = failure or (
                    redis_failure(node.alias, error) if not isinstance(error, BloomError) else error
                )
                result = None
            results.append(result)
        if failure is not None:
            if isinstance(failure, RedisUnreachable) and not isinstance(failure, CircuitOpen):
                try:
                    self.refresh()
                except RedisUnreachable:
                    pass
            raise failure
        if short is not None:
            short.replies = results
            raise short
        return results

    def _send_to(
        self,
        address: Any,
        payload: bytes,
        read: Any,
        durable: bool,
        redirect: Redirect | None = None,
        refreshed: bool = False,
    ) -> Any:
        node = self.node(address)
        if redirect is None:
            try:
                return node.send(payload, read, durable)
            except Redirect as exc:
                redirect = exc
        if redirect.ask:
            raise redirect
        if not refreshed:
            self.refresh(force=True)
        target = self.node(redirect.node) if redirect.node is not None else node
        return target.send(payload, read, durable)

    def _key_of(self, args: Sequence[Any]) -> str | None:
        if not args or len(args) < 2:
            return None
        if str(args[0]).upper() == "MEMORY":
            return str(args[2]) if len(args) > 2 else None
        return str(args[1])

    def call(self, *args: Any) -> Any:
        key = self._key_of(args)
        if key is None:
            return self._any_node().call(*args)
        return self._routed(key, lambda node, asking: _asking_call(node, asking, args))

    def eval(self, script: str, keys: Sequence[str], args: Sequence[Any]) -> Any:
        def run(node: NodeConnection, asking: bool) -> Any:
            if not asking:
                return node.eval(script, keys, args)
            return _asking_call(node, True, ("EVAL", script, len(keys), *keys, *args))

        return self._routed(keys[0], run)

    def mapped(self) -> Any:
        return mapped_errors(self.alias)


def _after_asking(read: Any) -> Any:
    """``read`` preceded by the ``+OK`` of ASKING, taken from the socket byte by byte:
    redis-py's parser would buffer past it, and ``read`` may read the socket itself."""

    def read_after(conn: Any) -> Any:
        sock = getattr(conn, "_sock", None)
        if sock is None:
            conn.read_response()
            return read(conn)
        got = b""
        while len(got) < len(ASKING_OK):
            chunk = sock.recv(len(ASKING_OK) - len(got))
            if not chunk:
                raise ConnectionError("Redis closed the connection")
            got += chunk
        if got != ASKING_OK:
            raise ReplyError(f"unexpected reply to ASKING: {got!r}")
        return read(conn)

    return read_after


def _asking_call(node: NodeConnection, asking: bool, args: Sequence[Any]) -> Any:
    if not asking:
        return node.call(*args)
    with node.mapped(), node.client.pipeline(transaction=False) as pipe:
        pipe.execute_command("ASKING")
        pipe.execute_command(*args)
        return pipe.execute()[1]
