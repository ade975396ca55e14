"""Redis's invalidation messages for local mirrors (client-side caching, ``CLIENT TRACKING``).

A mirror (engine/mirror.py) used to learn of another process's write only
when it next polled the filter's trailer (``MIRROR_REFRESH_SECONDS``). Here
one daemon thread per process and cache alias holds a connection of its own
(the alias's settings: host, TLS, password, Sentinel), switched to RESP3
(``HELLO 3``) with ``CLIENT TRACKING on BCAST PREFIX <bits key>`` for each
mirrored filter. Redis then pushes ``invalidate [key]`` to it whenever any
client writes a key with that prefix; the thread calls the mirror's
``invalidate``, and the mirror's next read (sync or async) re-checks the
trailer (one small GETRANGE) and reloads if its version moved (the write
counter, or the server: engine/mirror.py): milliseconds instead of the polling
interval. After a restart the thread reconnects and invalidates every mirror
of the alias, so a Redis that went back in time is re-checked too.

Polling stays on underneath: a mirror trusts its copy for at most
``MIRROR_REFRESH_SECONDS`` whatever this module does. So when Redis refuses
``HELLO 3`` or ``CLIENT TRACKING`` (Redis before 6, a proxy, a managed
service that disables it), or the connection is down, a mirror is exactly as
fresh as before. After the thread (re)connects and registers a prefix it
invalidates that prefix's mirrors once: a write made while it was not
listening is never missed. The thread reconnects with a backoff, forever, and
stops with the process (daemon) or when the settings change.
"""

from __future__ import annotations

import logging
import os
import select
import threading
from collections.abc import Callable
from typing import Any

from django_bloom.engine.transport.packing import ReplyReader, arguments, header

logger = logging.getLogger("django_bloom.engine.mirror")

RECONNECT_SECONDS = 0.5  # wait before connecting again after a failure (doubles, up to 5 s)
MAX_RECONNECT_SECONDS = 5.0
READ_TIMEOUT = 5.0  # one message, once it has started arriving
IDLE_WAKE_SECONDS = 0.25  # how soon a newly watched prefix is registered


def _command(*args: str) -> bytes:
    return header(len(args), *args[:1]) + arguments(*args[1:])


class TrackingRefused(Exception):
    """The server does not offer client-side caching (or refused this prefix)."""


def _refusal(reply: TrackingRefused) -> Exception:
    """A refusal for good (no tracking here), or a passing state worth a reconnect."""
    if str(reply).split(" ", 1)[0] in ("LOADING", "MASTERDOWN", "BUSY", "TRYAGAIN"):
        return ConnectionError(str(reply))
    return reply


class _Reader(ReplyReader):
    """ReplyReader plus whole RESP2/RESP3 values, for the few replies read here."""

    def value(self) -> Any:
        line = self.line()
        kind, rest = line[:1], line[1:]
        if kind in (b"+", b":", b","):
            return rest
        if kind == b"-":
            return TrackingRefused(rest.decode(errors="replace"))
        if kind == b"_":
            return None
        if kind in (b"$", b"=", b"!"):
            return None if rest == b"-1" else self.exact(int(rest) + 2)[:-2]
        if kind in (b"*", b">", b"~"):
            items = [] if rest == b"-1" else [self.value() for _ in range(int(rest))]
            return ("push", items) if kind == b">" else items
        if kind == b"%":
            return [self.value() for _ in range(2 * int(rest))]
        if kind == b"|":  # attributes, then the value they describe
            [self.value() for _ in range(2 * int(rest))]
            return self.value()
        raise TrackingRefused(f"unexpected reply {line[:40]!r}")

    def buffered(self) -> bool:
        return self.pos < len(self.buf)


class Listener:
    """Invalidation messages for one cache alias in this process (see module doc)."""

    def __init__(self, alias: str, make_connection: Callable[[], Any]):
        self.alias = alias
        self.make_connection = make_connection
        self._watchers: dict[str, list[Callable[[], None]]] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._conn: Any = None
        self.active = False  # connected, and every watched prefix registered
        self.refused: str | None = None  # why the server refused tracking, if it did
        self.client_id: int | None = None
        self._thread = threading.Thread(
            target=self._run, name=f"django-bloom tracking {alias}", daemon=True
        )
        self._thread.start()

    def watch(self, prefix: str, invalidate: Callable[[], None]) -> None:
        """Call ``invalidate()`` on every write to a key starting with ``prefix``
        (and once when the prefix is (re)registered)."""
        with self._lock:
            self._watchers.setdefault(prefix, []).append(invalidate)
            self.active = False  # until the new prefix is registered

    def stop(self) -> None:
        self._stop.set()
        conn = self._conn
        if conn is not None:
            try:
                conn.disconnect()
            except Exception:  # pragma: no cover - closing a broken socket
                pass

    # -- the thread ------------------------------------------------------------
    def _run(self) -> None:
        delay = RECONNECT_SECONDS
        while not self._stop.is_set():
            try:
                self._listen()
                delay = RECONNECT_SECONDS
            except TrackingRefused as exc:
                self.refused = str(exc)
                logger.info(
                    "Redis (%r) refused client-side caching (%s): local mirrors poll every "
                    "MIRROR_REFRESH_SECONDS",
                    self.alias,
                    exc,
                )
                return
            except Exception as exc:  # connection lost, timeouts, a failover...
                if self._stop.is_set():
                    return
                logger.debug("tracking connection of %r lost: %s", self.alias, exc)
            finally:
                self.active = False
                self._close()
            self._stop.wait(delay)
            delay = min(2 * delay, MAX_RECONNECT_SECONDS)

    def _close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.disconnect()
            except Exception:  # pragma: no cover
                pass

    def _listen(self) -> None:
        conn = self.make_connection()
        conn.socket_timeout = READ_TIMEOUT
        self._conn = conn
        conn.connect()
        sock = conn._sock
        sock.settimeout(READ_TIMEOUT)
        reader = _Reader(sock)
        sock.sendall(_command("HELLO", "3") + _command("CLIENT", "ID"))
        for _ in range(2):
            reply = self._reply(reader)
            if isinstance(reply, TrackingRefused):
                raise _refusal(reply)
            if isinstance(reply, bytes):
                self.client_id = int(reply)
        registered: set[str] = set()
        while not self._stop.is_set():
            with self._lock:
                pending = [p for p in self._watchers if p not in registered]
            for prefix in pending:
                sock.sendall(_command("CLIENT", "TRACKING", "on", "BCAST", "PREFIX", prefix))
                reply = self._reply(reader)
                if isinstance(reply, TrackingRefused) and "overlaps" not in str(reply):
                    raise _refusal(reply)
                registered.add(prefix)
                self._notify(prefix)  # whatever was written before we listened
            with self._lock:
                self.active = all(p in registered for p in self._watchers)
            pending_tls = getattr(sock, "pending", lambda: 0)()  # TLS: decrypted, unread
            if not reader.buffered() and not pending_tls:
                ready, _, _ = select.select([sock], [], [], IDLE_WAKE_SECONDS)
                if not ready:
                    continue
            self._dispatch(reader.value())

    def _reply(self, reader: _Reader) -> Any:
        """The next reply that is not a push (pushes arriving first are dispatched)."""
        while True:
            value = reader.value()
            if isinstance(value, tuple) and value[0] == "push":
                self._dispatch(value)
                continue
            return value

    def _dispatch(self, value: Any) -> None:
        if not (isinstance(value, tuple) and value[0] == "push"):
            return
        items = value[1]
        if not items or items[0] != b"invalidate":
            return
        keys = items[1] if len(items) > 1 else None
        if keys is None:  # FLUSHALL / FLUSHDB: everything
            for prefix in list(self._watchers):
                self._notify(prefix)
            return
        for key in keys:
            text = key.decode(errors="replace")
            for prefix in list(self._watchers):
                if text.startswith(prefix):
                    self._notify(prefix)

    def _notify(self, prefix: str) -> None:
        with self._lock:
            callbacks = list(self._watchers.get(prefix, ()))
        for invalidate in callbacks:
            invalidate()


_listeners: dict[str, tuple[int, Listener]] = {}
_lock = threading.Lock()


def listener_for(alias: str, make_connection: Callable[[], Any]) -> Listener:
    """This process's listener for ``alias`` (started on first use; a forked child
    starts its own)."""
    with _lock:
        entry = _listeners.get(alias)
        if entry is None or entry[0] != os.getpid():
            entry = _listeners[alias] = (os.getpid(), Listener(alias, make_connection))
        return entry[1]


def stop_listeners() -> None:
    """Stop every listener of this process (the settings changed; mirrors start over)."""
    with _lock:
        entries = list(_listeners.values())
        _listeners.clear()
    for pid, listener in entries:
        if pid == os.getpid():
            listener.stop()
