"""The one mapping of redis-py's errors to django-bloom's (``redis_failure``).

Refusals (full, read-only replica, loading, busy, cluster down...) become a
``RedisRefused`` subclass, connection errors ``RedisUnreachable``, a key of
another type ``FilterKeyMissing``, anything else ``BloomError``. Every transport
(connections.py, cluster.py, aio.py) and the kinds' own commands raise through it.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from redis import exceptions as redis_errors

from django_bloom.engine.transport.packing import ReplyError
from django_bloom.exceptions import (
    BloomError,
    ClusterDown,
    FilterKeyMissing,
    RedisFull,
    RedisLoading,
    RedisReadOnly,
    RedisRefused,
    RedisUnreachable,
)

CONNECTION_ERRORS = (redis_errors.ConnectionError, redis_errors.TimeoutError, OSError)

# Error replies by which Redis refuses a command it would otherwise run.
_REFUSALS: dict[str, type[RedisRefused]] = {
    "OOM": RedisFull,
    "READONLY": RedisReadOnly,
    "LOADING": RedisLoading,
    "MASTERDOWN": RedisRefused,
    "CLUSTERDOWN": ClusterDown,  # cluster_state:fail, or the slot is not served
    "TRYAGAIN": ClusterDown,  # a multi-key command on a slot being migrated
    "NOREPLICAS": RedisRefused,
    "BUSY": RedisRefused,
    "MISCONF": RedisRefused,
}
# redis-py strips the code from these replies' text; its exception class keeps it.
_CODE_OF_CLASS = (
    (redis_errors.BusyLoadingError, "LOADING"),
    (redis_errors.ReadOnlyError, "READONLY"),
    (getattr(redis_errors, "OutOfMemoryError", ()), "OOM"),
    (getattr(redis_errors, "MasterDownError", ()), "MASTERDOWN"),  # a ClusterDownError
    (getattr(redis_errors, "ClusterDownError", ()), "CLUSTERDOWN"),
    (getattr(redis_errors, "TryAgainError", ()), "TRYAGAIN"),
)


def _error_code(exc: BaseException) -> str:
    for cls, code in _CODE_OF_CLASS:
        if cls and isinstance(exc, cls):
            return code
    text = str(exc)
    if "of pipeline caused error: " in text:  # redis-py's annotation of a pipeline's error
        text = text.split("of pipeline caused error: ", 1)[1]
    return text.split(" ", 1)[0]


def redis_failure(alias: str, exc: BaseException) -> BloomError:
    """The one translation of a failed Redis call into django-bloom's exceptions.

    Refusals (full, read-only replica, loading, busy, ...) are checked before
    connection errors: redis-py makes LOADING a ConnectionError subclass. The result's
    ``__cause__`` is ``exc`` even where it is not raised at once (a cluster batch reads
    every node first): the breaker opens at once on a timeout it can see.
    """
    error = _translated(alias, exc)
    error.__cause__ = exc
    return error


def _translated(alias: str, exc: BaseException) -> BloomError:
    code = _error_code(exc)
    refused = _REFUSALS.get(code)
    if refused is not None and isinstance(exc, (redis_errors.RedisError, ReplyError)):
        text = str(exc) if str(exc).startswith(code) else f"{code} {exc}"
        return refused(f"Redis ({alias!r}) refused the command: {text}")
    if isinstance(exc, CONNECTION_ERRORS):
        return RedisUnreachable(f"Redis ({alias!r}) is unreachable: {exc}")
    if code == "WRONGTYPE":
        return FilterKeyMissing(f"Redis key holds another type: {exc}")
    return BloomError(f"Redis refused a command: {exc}")


@contextmanager
def mapped_errors(alias: str) -> Iterator[None]:
    """Redis errors raised inside, as the engine's (``redis_failure``)."""
    try:
        yield
    except (*CONNECTION_ERRORS, redis_errors.RedisError) as exc:
        raise redis_failure(alias, exc) from exc


def reply_or_error(conn: Any) -> Any:
    """The next reply; an error reply (NOSCRIPT among them) returned, not raised."""
    try:
        return conn.read_response()
    except redis_errors.ResponseError as exc:
        return exc


class Redirect(BloomError):
    """A node answered MOVED or ASK: the slot lives elsewhere (now, or for this key)."""

    def __init__(self, text: str):
        super().__init__(text)
        kind, _slot, address = (text.split() + ["", "", ""])[:3]
        self.ask = kind == "ASK"
        host, _, port = address.rpartition(":")
        self.node = (host, int(port)) if port.isdigit() else None


def redirect_of(exc: BaseException) -> Redirect | None:
    """A cluster's MOVED or ASK reply (redis-py's error or ours) as a ``Redirect``."""
    if isinstance(exc, redis_errors.AskError):  # MovedError is an AskError
        kind = "MOVED" if isinstance(exc, redis_errors.MovedError) else "ASK"
        return Redirect(f"{kind} {exc.slot_id} {exc.host}:{exc.port}")
    text = str(exc)
    if isinstance(exc, (ReplyError, redis_errors.ResponseError)) and text.split(" ", 1)[0] in (
        "MOVED",
        "ASK",
    ):
        return Redirect(text)
    return None
