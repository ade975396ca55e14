"""Bookkeeping off the request path: validator counters and ``items_added``.

Both are counted in process and written by one daemon thread per process
every ``FLUSH_SECONDS`` (started lazily, restarted in a forked child), and
once more at interpreter exit or a multiprocessing child's exit, so a request
never pays a round trip for them and a short-lived process (a management
command, a worker) loses nothing.
A flush never raises: a Redis or database error is logged and the counts are
kept for the next one. Counts still pending when a process is killed
(SIGKILL, OOM) are lost; the fill-based estimate in ``stats()`` is not.

Validator outcomes, in a Redis hash beside the filter:

- ``db_skipped``: the filter said "absent"; no database query was made.
- ``db_confirmed``: the filter said "maybe"; the database found the value.
- ``false_positives``: the filter said "maybe"; the database did not.
- ``unavailable``: the filter could not answer; the database decided.

``items_added`` (items ``add()`` reported new) goes to the filter's row with
``UPDATE ... SET items_added = items_added + n``.
"""

from __future__ import annotations

import atexit
import logging
import multiprocessing
import multiprocessing.util
import os
import threading
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from django_bloom.services import Filter

logger = logging.getLogger("django_bloom.ops.counters")

FLUSH_SECONDS = 5.0
TICK_SECONDS = 0.5  # the flusher looks at the clock this often (FLUSH_SECONDS may change)
LOCK_WAIT_SECONDS = 1.0  # a reader waits this long for an in-flight flush, then reads anyway
OUTCOMES = ("db_skipped", "db_confirmed", "false_positives", "unavailable")

_pending: dict[str, dict[str, int]] = {}  # counters key -> outcome -> count
_handles: dict[str, Filter] = {}
_added: dict[tuple[int, str], int] = {}  # (row id, filter key) -> items reported new
_added_meta: dict[tuple[int, str], Any] = {}
_lock = threading.Lock()  # guards the dicts above; never held during I/O
_flush_lock = threading.Lock()  # one flush at a time, so a reader sees in-flight counts land
_flusher_pid = 0


# -- counting (request path: memory only) ----------------------------------------
def record(handle: Filter, outcome: str) -> None:
    """Count one validator outcome for the filter ``handle``."""
    name = handle.counters_key
    with _lock:
        bucket = _pending.setdefault(name, dict.fromkeys(OUTCOMES, 0))
        bucket[outcome] += 1
        _handles[name] = handle
    _ensure_flusher()


def count_added(meta: Any, key: tuple[int, str], new: int) -> None:
    """Count ``new`` items reported new by ``add`` on the filter row ``meta``."""
    with _lock:
        _added[key] = _added.get(key, 0) + new
        _added_meta[key] = meta
    _ensure_flusher()


def pending_added(key: tuple[int, str]) -> int:
    with _lock:
        return _added.get(key, 0)


# -- flushing (the daemon thread, exit, and readers) --------------------------------
def flush(name: str | None = None) -> None:
    """Write pending validator counts to Redis (all filters, or one counters key). Never raises."""
    _flush_each(_pending, name, _flush_counters)


def _flush_each(store: dict, key: Any, write: Any) -> None:
    """``write`` each pending key of ``store`` (or just ``key``), one flush at a time."""
    if not _flush_lock.acquire(timeout=LOCK_WAIT_SECONDS):
        return  # another flush is stuck (a stalled server): the counts wait for the next one
    try:
        with _lock:
            keys = [key] if key else list(store)
        for one in keys:
            write(one)
    finally:
        _flush_lock.release()


def _flush_counters(name: str) -> None:
    with _lock:
        deltas = _pending.pop(name, None)
        handle = _handles.get(name)
    if not deltas or handle is None:
        return
    try:
        handle.incr_counters(deltas)
    except Exception as exc:  # noqa: BLE001 - bookkeeping must never fail a caller
        logger.warning("could not flush validator counters of %r: %s", name, exc)
        with _lock:
            bucket = _pending.setdefault(name, dict.fromkeys(OUTCOMES, 0))
            for key, value in deltas.items():
                bucket[key] += value


def flush_added(key: tuple[int, str] | None = None) -> None:
    """Write pending ``items_added`` counts to their rows (all, or one). Never raises."""
    _flush_each(_added, key, _flush_added)


def _flush_added(key: tuple[int, str]) -> None:
    from django.db.models import F

    from django_bloom.models import BloomFilter

    with _lock:
        pending = _added.pop(key, 0)
        meta = _added_meta.get(key)
    if not pending or meta is None:
        return
    try:
        rows = BloomFilter.objects.filter(pk=key[0]).update(items_added=F("items_added") + pending)
    except Exception as exc:  # noqa: BLE001 - a counter must never fail an add
        logger.warning("could not flush items_added of %r: %s", meta.name, exc)
        rows = 0
    if not rows:  # an error, or the row is not visible (yet) to this connection: keep them
        with _lock:
            _added[key] = _added.get(key, 0) + pending


def forget(counters_key: str) -> None:
    """Drop this process's pending validator counts of a deleted filter (a later
    flush would write them into a counters key that should stay gone)."""
    with _lock:
        _pending.pop(counters_key, None)
        _handles.pop(counters_key, None)


def discard_pending() -> None:
    """Forget every pending count (tests: a test's keys are deleted with its prefix)."""
    with _lock:
        _pending.clear()
        _added.clear()


def flush_all() -> None:
    """Everything this process holds. Never raises."""
    try:
        flush()
        flush_added()
    except Exception:  # noqa: BLE001
        logger.exception("django-bloom bookkeeping flush failed")


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
    from django.db import connections

    last = time.monotonic()
    while True:
        time.sleep(min(FLUSH_SECONDS, TICK_SECONDS))
        if time.monotonic() - last < FLUSH_SECONDS:
            continue
        last = time.monotonic()
        with _lock:
            idle = not _pending and not _added
        if not idle:
            flush_all()
            connections.close_all()  # this thread's own: none left open between flushes


def _after_fork_in_child() -> None:
    """A child starts empty (its parent flushes what it counted) with fresh locks."""
    global _lock, _flush_lock, _flusher_pid
    _lock, _flush_lock, _flusher_pid = threading.Lock(), threading.Lock(), 0
    _pending.clear()
    _handles.clear()
    _added.clear()
    _added_meta.clear()


os.register_at_fork(after_in_child=_after_fork_in_child)
atexit.register(flush_all)


# -- reading --------------------------------------------------------------------
def read_counters(handle: Filter) -> dict[str, Any]:
    """Counters of one filter (this process's pending counts included).

    ``observed_fpr`` = false positives / values that were really absent
    (db_skipped + false_positives); None before any such value was checked.
    """
    flush(handle.counters_key)
    stored = handle.stored_counters()
    data: dict[str, Any] = {key: stored.get(key, 0) for key in OUTCOMES}
    absent = data["db_skipped"] + data["false_positives"]
    data["observed_fpr"] = data["false_positives"] / absent if absent else None
    checked = absent + data["db_confirmed"]
    data["db_queries_saved_ratio"] = data["db_skipped"] / checked if checked else None
    return data


def reset(handle: Filter) -> None:
    with _lock:
        _pending.pop(handle.counters_key, None)
    handle.reset_counters()
