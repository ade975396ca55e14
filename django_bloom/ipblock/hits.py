"""Hits and last seen per blocklist entry, and cooldowns: counted in process on each refused
request (memory only), written in batches off the request path by the counters' writer
thread (``counters.py``, every ``FLUSH_SECONDS`` and at exit).

In the database, on ``BlockedEntry`` (``hits``, ``last_seen_at``, and ``expires_at`` for a
cooldown entry), not in Redis: the admin sorts by them, ``bloom blocklist report`` queries
them, and a cooldown's restarted expiry must reach the rows, which are the truth every
check confirms against. A flush is one ``UPDATE`` per ``CHUNK`` entries (``bulk_update``:
``hits + n``, the later of two last-seen times and expiries, so processes flushing in any
order add up and never move a time back), under ``db_access.write_transaction`` (SQLite's
write lock first). A flush that fails keeps its counts for the next one; counts still pending when
a process is killed are lost, as the counters' are.
"""

from __future__ import annotations

import logging
import os
import threading
from datetime import datetime

from django.db import DatabaseError, connections
from django.db.models import Case, DateTimeField, F, Value, When
from django.db.models.functions import Coalesce, Greatest
from django.utils import timezone

from django_bloom import counters
from django_bloom.db_access import write_transaction
from django_bloom.models import BlockedEntry

logger = logging.getLogger("django_bloom.blocklist")

CHUNK = 100  # entries per UPDATE (a few parameters each: old SQLite allows 999)

# entry pk -> [refused requests, last one, the expiry a cooldown restarted (None: none)]
_pending: dict[int, list] = {}
_lock = threading.Lock()


def record(entry: BlockedEntry, now: datetime | None = None) -> None:
    """Count a request ``entry`` refused. A cooldown entry's expiry restarts here, on the
    row in hand (the one this process's checks confirm with) and on the next flush."""
    now = now or timezone.now()
    restarted = None
    if entry.cooldown and entry.expires_at is not None:
        restarted = entry.expires_at = max(entry.expires_at, now + entry.cooldown)
    with _lock:
        _add(entry.pk, 1, now, restarted)
    counters.also_flush(flush_in_writer)


def _add(pk: int, count: int, seen: datetime, expiry: datetime | None) -> None:
    """Add to the pending counts of ``pk`` (with ``_lock`` held)."""
    counts = _pending.setdefault(pk, [0, seen, expiry])
    counts[0] += count
    counts[1] = max(counts[1], seen)
    if expiry is not None:
        counts[2] = max(counts[2] or expiry, expiry)


def flush() -> bool:
    """Write the pending counts (one UPDATE per ``CHUNK`` entries); whether there were any.
    Never raises."""
    with _lock:
        pending = dict(_pending)
        _pending.clear()
    if not pending:
        return False
    try:
        with write_transaction():
            BlockedEntry.objects.bulk_update(
                [_increment(pk, *counts) for pk, counts in pending.items()],
                ["hits", "last_seen_at", "expires_at"],
                batch_size=CHUNK,
            )
    except DatabaseError as exc:
        logger.warning("could not write the blocklist's hits (kept for the next flush): %s", exc)
        with _lock:
            for pk, (count, seen, expiry) in pending.items():
                _add(pk, count, seen, expiry)
    return True


def _increment(pk: int, count: int, seen: datetime, expiry: datetime | None) -> BlockedEntry:
    """A row whose fields are what ``bulk_update`` writes (in one ``CASE`` per field): the
    hits added, the later last seen, the later expiry (a cooldown's, if it restarted)."""
    row, at = BlockedEntry(pk=pk), Value(seen, output_field=DateTimeField())
    row.hits = F("hits") + count
    row.last_seen_at = Greatest(Coalesce("last_seen_at", at), at)
    row.expires_at = F("expires_at")
    if expiry is not None:  # (an entry that no longer expires stays so: NULL)
        later = Greatest("expires_at", Value(expiry, output_field=DateTimeField()))
        row.expires_at = Case(When(expires_at__isnull=False, then=later))
    return row


def flush_in_writer() -> None:
    """``flush`` as the writer thread runs it: that thread's connection is closed after, so
    none stays open between flushes (at exit, on the main thread, it is left to Django)."""
    if flush() and threading.current_thread() is not threading.main_thread():
        connections.close_all()


def discard_pending() -> None:
    """Forget the pending counts (tests: their rows go with the test's transaction)."""
    with _lock:
        _pending.clear()


def _after_fork_in_child() -> None:
    """A child starts empty (its parent writes what it counted), with a fresh lock."""
    global _lock
    _lock = threading.Lock()
    _pending.clear()


os.register_at_fork(after_in_child=_after_fork_in_child)
