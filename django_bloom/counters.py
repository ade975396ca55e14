"""How the unique validator's filter pays off: cheap counters kept in Redis.

Outcomes are counted in process and flushed to a Redis hash beside the
filter at most every ``FLUSH_SECONDS`` per filter (one pipelined round trip),
so the "absent" path never pays a round trip of its own for statistics.

- ``db_skipped``: the filter said "absent"; no database query was made.
- ``db_confirmed``: the filter said "maybe"; the database found the value.
- ``false_positives``: the filter said "maybe"; the database did not.
- ``unavailable``: the filter could not answer; the database decided.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from django_bloom.exceptions import FilterUnavailable

logger = logging.getLogger("django_bloom.counters")

FLUSH_SECONDS = 5.0
OUTCOMES = ("db_skipped", "db_confirmed", "false_positives", "unavailable")

_pending: dict[str, dict[str, int]] = {}
_last_flush: dict[str, float] = {}
_handles: dict[str, Any] = {}
_lock = threading.Lock()


def record(handle: Any, outcome: str) -> None:
    """Count one validator outcome for the filter ``handle``."""
    name = handle.layout.keys.counters
    with _lock:
        bucket = _pending.setdefault(name, dict.fromkeys(OUTCOMES, 0))
        bucket[outcome] += 1
        _handles[name] = handle
        due = time.monotonic() - _last_flush.get(name, 0.0) >= FLUSH_SECONDS
    if due:
        flush(name)


def flush(name: str | None = None) -> None:
    """Write pending counts to Redis (all filters, or one counters key). Never raises."""
    names = [name] if name else list(_pending)
    for one in names:
        with _lock:
            deltas = _pending.pop(one, None)
            handle = _handles.get(one)
            _last_flush[one] = time.monotonic()
        if not deltas or handle is None:
            continue
        try:
            handle.storage.incr_counters(handle.layout, deltas)
        except FilterUnavailable as exc:  # keep them for the next flush
            logger.warning("could not flush validator counters of %r: %s", one, exc)
            with _lock:
                bucket = _pending.setdefault(one, dict.fromkeys(OUTCOMES, 0))
                for key, value in deltas.items():
                    bucket[key] += value


def read_counters(handle: Any) -> dict[str, Any]:
    """Counters of one filter (this process's pending counts included).

    ``observed_fpr`` = false positives / values that were really absent
    (db_skipped + false_positives); None before any such value was checked.
    """
    flush(handle.layout.keys.counters)
    stored = handle.storage.read_counters(handle.layout)
    data: dict[str, Any] = {key: stored.get(key, 0) for key in OUTCOMES}
    absent = data["db_skipped"] + data["false_positives"]
    data["observed_fpr"] = data["false_positives"] / absent if absent else None
    checked = absent + data["db_confirmed"]
    data["db_queries_saved_ratio"] = data["db_skipped"] / checked if checked else None
    return data


def reset(handle: Any) -> None:
    with _lock:
        _pending.pop(handle.layout.keys.counters, None)
    handle.storage.reset_counters(handle.layout)
