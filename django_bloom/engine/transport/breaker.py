"""A circuit breaker per cache alias: a Redis that is down or stalled costs one
request a timeout, then every call fails at once until Redis answers again.

States (per alias, per process):

- ``closed``: calls go to Redis. Each connection failure or timeout is counted;
  a success resets the count. ``BREAKER_FAILURES`` consecutive failures open
  the breaker, and so does a single timeout (each one costs a whole
  ``SOCKET_TIMEOUT``, a stalled Redis must not cost that on every request).
- ``open``: calls raise ``CircuitOpen`` (a ``RedisUnreachable``, so a
  ``FilterUnavailable``) without touching the network. A background thread
  waits ``BREAKER_RETRY_SECONDS`` and probes with a PING.
- ``half-open``: that probe is in flight (calls still fail at once). Success
  closes the breaker; failure opens it for another interval.

Only connection failures count: a missing key, a refused command (a
cluster's CLUSTERDOWN or TRYAGAIN too: ``ClusterDown``, one round trip) or a
replica shortfall is an answer from Redis. ``Breaker.failed`` is the one place
that decides: it ignores the breaker's own ``CircuitOpen`` and a failure marked
``breaker_counts = False`` (the asyncio transport's ``LoopTooBusy``). In the
closed state the cost on the hot path is one attribute read before and one
after the call.
"""

from __future__ import annotations

import functools
import logging
import os
import threading
import time
from collections.abc import Callable
from typing import Any

from redis import exceptions as redis_errors

from django_bloom.conf import forget_on_change, get_config
from django_bloom.exceptions import CircuitOpen, RedisUnreachable

logger = logging.getLogger("django_bloom.breaker")

CLOSED, OPEN, HALF_OPEN = "closed", "open", "half-open"


def _is_timeout(exc: BaseException | None) -> bool:
    """Whether a failure (or what caused it) was a timeout."""
    for _ in range(5):
        if exc is None:
            return False
        if isinstance(exc, (TimeoutError, redis_errors.TimeoutError)):  # socket.timeout too
            return True
        exc = exc.__cause__ or exc.__context__
    return False


class Breaker:
    def __init__(self, alias: str):
        self.alias = alias
        self.dirty = False  # False iff closed with no failure counted: the hot path reads only this
        self.state = CLOSED
        self.failures = 0
        self.opened_at: float | None = None  # time.time() of the last opening
        self.retry_at: float | None = None  # time.time() of the next probe
        self.last_error = ""
        self._probe: Callable[[], Any] | None = None
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._thread_pid = 0

    def check(self) -> None:
        """Raise ``CircuitOpen`` unless calls may go to Redis."""
        if self.state == CLOSED:
            return
        self._ensure_prober()
        wait = max(0.0, (self.retry_at or 0.0) - time.time())
        raise CircuitOpen(
            f"Redis ({self.alias!r}) is unreachable: circuit breaker {self.state} after "
            f"{self.failures} failure(s) (last: {self.last_error}); next probe in {wait:.1f} s"
        )

    def failed(self, exc: BaseException, probe: Callable[[], Any]) -> None:
        """Count a connection failure; open when due. ``probe`` PINGs Redis.

        Not counted: ``CircuitOpen`` (this breaker's own refusal, no call was made)
        and a failure whose class sets ``breaker_counts = False``."""
        if isinstance(exc, CircuitOpen) or not getattr(exc, "breaker_counts", True):
            return
        config = get_config()
        with self._lock:
            self._probe = probe
            self.failures += 1
            self.last_error = str(exc)[:200]
            self.dirty = True
            due = self.failures >= config["BREAKER_FAILURES"] or _is_timeout(exc)
            if self.state != CLOSED or not due:
                return
            self.state = OPEN
            self.opened_at = time.time()
            self.retry_at = self.opened_at + config["BREAKER_RETRY_SECONDS"]
        logger.warning(
            "Redis (%r) unreachable (%s): circuit breaker open, calls fail at once; "
            "probing every %s s",
            self.alias,
            self.last_error,
            config["BREAKER_RETRY_SECONDS"],
        )
        self._ensure_prober()

    def succeeded(self) -> None:
        with self._lock:
            was = self.state
            self.state, self.failures, self.dirty = CLOSED, 0, False
            self.opened_at = self.retry_at = None
        if was != CLOSED:
            logger.warning("Redis (%r) answers again: circuit breaker closed", self.alias)

    def reset(self) -> None:
        with self._lock:
            self.state, self.failures, self.dirty, self.last_error = CLOSED, 0, False, ""
            self.opened_at = self.retry_at = None

    # -- background probe ---------------------------------------------------
    def _ensure_prober(self) -> None:
        """One probing thread per open breaker and process (a forked child starts its own)."""
        pid = os.getpid()
        thread = self._thread
        if thread is not None and thread.is_alive() and self._thread_pid == pid:
            return
        with self._lock:
            thread = self._thread
            if thread is not None and thread.is_alive() and self._thread_pid == pid:
                return
            self._thread = threading.Thread(
                target=self._probe_loop, name=f"bloom-breaker-{self.alias}", daemon=True
            )
            self._thread_pid = pid
            self._thread.start()

    def _probe_loop(self) -> None:
        while True:
            with self._lock:
                if self.state == CLOSED or self._thread is not threading.current_thread():
                    return
                wait = (self.retry_at or 0.0) - time.time()
            if wait > 0:
                time.sleep(min(wait, 0.5))
                continue
            with self._lock:
                if self.state == CLOSED:
                    return
                self.state, probe = HALF_OPEN, self._probe
            try:
                if probe is None:
                    raise RedisUnreachable("no probe")
                probe()
            except Exception as exc:  # still down: try again later
                with self._lock:
                    if self.state == HALF_OPEN:
                        self.state = OPEN
                        self.last_error = str(exc)[:200]
                        self.retry_at = time.time() + get_config()["BREAKER_RETRY_SECONDS"]
                continue
            self.succeeded()
            return

    def as_dict(self) -> dict[str, Any]:
        return {
            "alias": self.alias,
            "state": self.state,
            "failures": self.failures,
            "opened_at": self.opened_at,
            "retry_at": self.retry_at,
            "last_error": self.last_error,
        }


_breakers: dict[str, Breaker] = {}
_lock = threading.Lock()


def breaker_for(alias: str) -> Breaker:
    found = _breakers.get(alias)
    if found is None:
        with _lock:
            found = _breakers.setdefault(alias, Breaker(alias))
    return found


def states() -> list[dict[str, Any]]:
    """This process's breakers (aliases used so far): alias, state, failures,
    opened_at / retry_at (Unix times or None) and last_error. For the admin and
    ``bloom stats``."""
    return [_breakers[alias].as_dict() for alias in sorted(_breakers)]


def reset(alias: str | None = None) -> None:
    """Close breakers (all, or one alias's); a waiting probe thread then exits."""
    for name, found in list(_breakers.items()):
        if alias is None or name == alias:
            found.reset()


forget_on_change(reset, caches=True)


def guarded(method: Callable) -> Callable:
    """Wrap a ``Storage`` method that talks to Redis with its alias's breaker.

    The storage object provides ``breaker`` and ``ping`` (the probe).
    """

    @functools.wraps(method)
    def call(self: Any, *args: Any, **kwargs: Any) -> Any:
        breaker = self.breaker
        if breaker.dirty:
            breaker.check()
        try:
            result = method(self, *args, **kwargs)
        except RedisUnreachable as exc:
            breaker.failed(exc, self.ping)
            raise
        if breaker.dirty:
            breaker.succeeded()
        return result

    return call
