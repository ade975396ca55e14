"""The package's one per-process cache whose entries expire, and its one throttle.

The handle cache, the stats cache, the blocklist's caches and the warning throttles are
each an ``Expiring``: one freshness rule, one lock discipline.
"""

from __future__ import annotations

import threading
import time
from typing import Any

MISSING: Any = object()  # what ``Expiring.get`` answers by default for nothing fresh


class Expiring:
    """A per-process cache whose entries expire: key -> (deadline, value), deadlines in
    ``time.monotonic()`` seconds. The handle cache (``registry``), the stats cache
    (``ops.monitoring``) and the blocklist's prefix lengths and confirmations are each
    one, and so are the two warning throttles (``claim``: the blocklist's, the
    past-capacity warning's). Reads take no lock (one dict read); writes do. With
    ``max_entries``, a write that would go past it empties the cache first."""

    def __init__(self, max_entries: int | None = None) -> None:
        self.max_entries = max_entries
        self._entries: dict[Any, tuple[float, Any]] = {}
        self._lock = threading.Lock()

    def get(self, key: Any, now: float, default: Any = MISSING) -> Any:
        """The value kept for ``key`` if its deadline is after ``now``, else ``default``
        (``MISSING``: a kept value may be None)."""
        entry = self._entries.get(key)
        return entry[1] if entry is not None and entry[0] > now else default

    def claim(self, key: Any, interval: float) -> bool:
        """A throttle: True when no claim of ``key`` is younger than ``interval`` seconds
        (then this one is kept), whatever the threads. Its entries hold the time of the
        claim, so an interval changed meanwhile applies to past claims too."""
        now = time.monotonic()
        since = now - interval
        if self.get(key, since) is not MISSING:
            return False
        with self._lock:
            if self.get(key, since) is not MISSING:
                return False
            self._entries[key] = (now, True)
        return True

    def put(self, key: Any, value: Any, deadline: float) -> None:
        self.put_many({key: value}, deadline)

    def put_many(self, values: dict[Any, Any], deadline: float) -> None:
        with self._lock:
            if self.max_entries is not None and len(self._entries) + len(values) > self.max_entries:
                self._entries.clear()
            for key, value in values.items():
                self._entries[key] = (deadline, value)

    def pop(self, key: Any) -> None:
        with self._lock:
            self._entries.pop(key, None)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
