"""Bookkeeping off the request path: the validator's outcomes and ``items_added``, kept in
Redis (a hash beside the filter), never in the database.

Both are counted in process and written by one daemon thread per process every
``FLUSH_SECONDS`` with ``HINCRBY`` (started lazily, restarted in a forked child), and once
more at interpreter exit or a multiprocessing child's exit, so a request never pays a round
trip for them and a short-lived process (a management command, a worker) loses nothing.
The counts here go to Redis only; the same thread also runs the flushes registered with
``also_flush`` (the blocklist's hits, ``ipblock/hits.py``, which write the database).
A flush never raises: a Redis error is logged and the counts are kept for the next one.
Counts still pending when a process is killed (SIGKILL, OOM) are lost; the fill-based
estimate in ``stats()`` is not.

Fields of the hash (the ``counters`` key of ``counters_segment``; a family's members
share the family's):

- ``db_skipped``: the filter said "absent"; no database query was made.
- ``db_confirmed``: the filter said "maybe"; the database found the value.
- ``false_positives``: the filter said "maybe"; the database did not.
- ``unavailable``: the filter could not answer; the database decided.
- ``items_added``: items ``add()`` reported new (a rebuild sets it to the items it read,
  ``clear()`` drops it).
"""

from __future__ import annotations

import atexit
import logging
import multiprocessing
import multiprocessing.util
import os
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

logger = logging.getLogger("django_bloom.ops.counters")

FLUSH_SECONDS = 5.0
TICK_SECONDS = 0.5  # the flusher looks at the clock this often (FLUSH_SECONDS may change)
LOCK_WAIT_SECONDS = 1.0  # a reader waits this long for an in-flight flush, then reads anyway
OUTCOMES = ("db_skipped", "db_confirmed", "false_positives", "unavailable")
ADDED = "items_added"


class Counted(Protocol):
    """What the counters need of a handle (``Filter`` and ``Family`` are ones): its
    storage and the segment whose ``counters`` key holds the hash."""

    storage: Any
    counters_segment: Any


_pending: dict[str, dict[str, int]] = {}  # counters key -> field -> count
_totals: dict[str, int] = {}  # counters key -> items_added as Redis answered the last flush
_handles: dict[str, Counted] = {}
_lock = threading.Lock()  # guards the dicts above; never held during I/O
_flush_lock = threading.Lock()  # one flush at a time, so a reader sees in-flight counts land
_flusher_pid = 0
_also: list[Callable[[], None]] = []  # other bookkeeping this thread writes (``also_flush``)


# -- counting (request path: memory only) ----------------------------------------
def record(handle: Counted, outcome: str, count: int = 1) -> None:
    """Count ``count`` of one field (a validator outcome, or ``items_added``)."""
    if not count:
        return
    name = handle.counters_segment.keys.counters
    with _lock:
        bucket = _pending.setdefault(name, {})
        bucket[outcome] = bucket.get(outcome, 0) + count
        _handles[name] = handle
    _ensure_flusher()


def count_added(handle: Counted, new: int) -> int:
    """Count ``new`` items reported new by ``add``: memory only, never a round trip.
    Returns this process's estimate of ``items_added`` over every process: the total Redis
    answered the last flush, plus what is pending here (the capacity watch reads it)."""
    record(handle, ADDED, new)
    name = handle.counters_segment.keys.counters
    with _lock:
        return _totals.get(name, 0) + _pending.get(name, {}).get(ADDED, 0)


# -- flushing (the daemon thread, exit, and readers) --------------------------------
def flush(name: str | None = None) -> None:
    """Write pending counts to Redis (all filters, or one counters key). Never raises."""
    if not _flush_lock.acquire(timeout=LOCK_WAIT_SECONDS):
        return  # another flush is stuck (a stalled server): the counts wait for the next one
    try:
        with _lock:
            names = [name] if name else list(_pending)
        for one in names:
            _flush_one(one)
    finally:
        _flush_lock.release()


def _flush_one(name: str) -> None:
    with _lock:
        deltas = _pending.pop(name, None)
        handle = _handles.get(name)
    if not deltas or handle is None:
        return
    try:
        totals = handle.storage.incr_counters(handle.counters_segment, deltas)
        if ADDED in totals:
            with _lock:
                _totals[name] = totals[ADDED]
    except Exception as exc:  # noqa: BLE001 - bookkeeping must never fail a caller
        logger.warning("could not flush the counters of %r: %s", name, exc)
        with _lock:
            bucket = _pending.setdefault(name, {})
            for key, value in deltas.items():
                bucket[key] = bucket.get(key, 0) + value


def forget(handle: Counted) -> None:
    """Drop this process's pending counts of a deleted filter (a later flush would write
    them into a counters key that should stay gone)."""
    name = handle.counters_segment.keys.counters
    with _lock:
        _pending.pop(name, None)
        _handles.pop(name, None)
        _totals.pop(name, None)


def discard_pending() -> None:
    """Forget every pending count (tests: a test's keys are deleted with its prefix)."""
    with _lock:
        _pending.clear()
        _totals.clear()


def flush_all() -> None:
    """Everything this process holds, the ``also_flush`` flushes too. Never raises."""
    for one in (flush, *_also):
        try:
            one()
        except Exception:  # noqa: BLE001
            logger.exception("django-bloom bookkeeping flush failed")


def also_flush(flush_more: Callable[[], None]) -> None:
    """Have the writer thread run ``flush_more`` too, every ``FLUSH_SECONDS`` and at exit
    (the thread starts now if need be). It should be cheap when it has nothing to write."""
    if flush_more not in _also:
        _also.append(flush_more)
    _ensure_flusher()


def _ensure_flusher() -> None:
    global _flusher_pid
    if _flusher_pid == os.getpid():
        return
    with _lock:
        if _flusher_pid == os.getpid():
            return
        _flusher_pid = os.getpid()
    threading.Thread(target=_run, name="django-bloom-flusher", daemon=True).start()
    if multiprocessing.parent_process() is not None:
        # A multiprocessing child leaves through os._exit (fork), skipping atexit;
        # its own exit hook runs these finalizers.
        multiprocessing.util.Finalize(None, flush_all, exitpriority=10)


def _run() -> None:
    last = time.monotonic()
    while True:
        time.sleep(min(FLUSH_SECONDS, TICK_SECONDS))
        if time.monotonic() - last < FLUSH_SECONDS:
            continue
        last = time.monotonic()
        with _lock:
            idle = not _pending and not _also
        if not idle:
            flush_all()


def _after_fork_in_child() -> None:
    """A child starts empty (its parent flushes what it counted) with fresh locks."""
    global _lock, _flush_lock, _flusher_pid
    _lock, _flush_lock, _flusher_pid = threading.Lock(), threading.Lock(), 0
    _pending.clear()
    _handles.clear()
    _totals.clear()


os.register_at_fork(after_in_child=_after_fork_in_child)
atexit.register(flush_all)


# -- reading and writing --------------------------------------------------------------
def _stored(handle: Counted) -> dict[str, int]:
    """The hash with this process's pending counts flushed first (or added, if the flush
    could not write)."""
    name = handle.counters_segment.keys.counters
    flush(name)
    stored = handle.storage.read_counters(handle.counters_segment)
    with _lock:
        for key, value in _pending.get(name, {}).items():
            stored[key] = stored.get(key, 0) + value
    return stored


def read_counters(handle: Counted) -> dict[str, Any]:
    """The validator's counters of one filter (this process's pending counts included).

    ``observed_fpr`` = false positives / values that were really absent
    (db_skipped + false_positives); None before any such value was checked.
    """
    data: dict[str, Any] = outcomes(_stored(handle))
    absent = data["db_skipped"] + data["false_positives"]
    data["observed_fpr"] = data["false_positives"] / absent if absent else None
    checked = absent + data["db_confirmed"]
    data["db_queries_saved_ratio"] = data["db_skipped"] / checked if checked else None
    return data


def outcomes(stored: dict | None) -> dict[str, int]:
    """The validator's outcomes of a counters hash, as read (text or bytes fields, as a
    raw HGETALL answers); 0 for an outcome never counted. ``read_counters`` and
    ``status.filter_report`` (which reads the hash in its own pipeline) both use it."""
    text = {(k.decode() if isinstance(k, bytes) else k): int(v) for k, v in (stored or {}).items()}
    return {outcome: text.get(outcome, 0) for outcome in OUTCOMES}


def items_added(handle: Counted) -> int:
    """Items ``add()`` reported new, every process's (this one's pending included)."""
    return _stored(handle).get(ADDED, 0)


def set_added(handle: Counted, count: int) -> None:
    """After a rebuild or a clear: the filter holds ``count`` items (0: drop the field)."""
    with _lock:
        _pending.get(handle.counters_segment.keys.counters, {}).pop(ADDED, None)
        _totals[handle.counters_segment.keys.counters] = count
    if count:
        handle.storage.write_counters(handle.counters_segment, {ADDED: count})
    else:
        handle.storage.write_counters(handle.counters_segment, {}, drop=(ADDED,))
