"""Local mirror: an in-process copy of a read-mostly filter's bitmap.

Opt in per filter with ``DJANGO_BLOOM["MIRROR_FILTERS"]``. Reads then cost no
Redis round trip. The copy is loaded with one GET (bitmap and trailer
together, so they always match) and re-checked at most every
``MIRROR_REFRESH_SECONDS``: one small GETRANGE of the trailer, whose write
counter changes on every add, clear and rebuild; only then is the bitmap
fetched again. Writes made by this process are applied to the copy at once.
Writes by other processes show up within milliseconds where Redis offers
client-side caching: Redis pushes an invalidation for the filter's key to this
process's listener (engine/transport/tracking.py) and the next read re-checks the
trailer. Otherwise (refused, or the listener is reconnecting) they show up
within the refresh interval, the staleness you accept by opting in; the
interval applies in every case, so the listener can only make a copy fresher.
Filters larger than ``MIRROR_MAX_BYTES`` are not mirrored (reads go to Redis
as usual). A lost key drops the copy and
raises ``FilterKeyMissing``, as a Redis read would.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Sequence
from typing import Any

from django_bloom.conf import forget_on_change, get_config
from django_bloom.engine.hashing import numpy_module
from django_bloom.engine.kinds.capabilities import Mirrorable
from django_bloom.engine.transport import tracking
from django_bloom.exceptions import FilterKeyMissing


class LocalMirror:
    def __init__(self, handle: Any, refresh_seconds: float, layout: Any = None):
        layout = layout or handle.layout
        self.layout = layout
        self.storage = handle.storage
        self.refresh_seconds = refresh_seconds
        self.bitmap = bytearray()
        self.version: tuple[int, int] | None = None
        self.checked_at = float("-inf")
        self.invalidations = 0  # bumped by the tracking listener's thread
        self.checked_invalidations = -1  # ``invalidations`` when last checked
        self.tracked = False  # watched by this process's tracking listener
        self.loads = 0
        self._lock = threading.Lock()
        self._probe = layout.prober()

    def invalidate(self) -> None:
        """Redis says the key changed (or may have): re-check on the next read."""
        self.invalidations += 1

    def track(self) -> None:
        """Ask this process's listener (transport/tracking.py) for the key's invalidations."""
        listener = tracking.listener_for(self.storage.alias, self.storage.make_connection)
        listener.watch(self.layout.segment.keys.bits, self.invalidate)
        self.tracked = True

    def forked(self) -> None:
        """In a forked child: the parent's listener thread is gone. Re-check on the next
        read, which registers with the child's own listener."""
        self.tracked = False
        self.invalidations += 1

    def _fresh(self) -> bytearray:
        now = time.monotonic()
        if (
            now - self.checked_at < self.refresh_seconds
            and self.invalidations == self.checked_invalidations
        ):
            return self.bitmap
        with self._lock:
            seen = self.invalidations  # before the read: a later push forces another
            if now - self.checked_at < self.refresh_seconds and seen == self.checked_invalidations:
                return self.bitmap
            if not self.tracked and get_config()["MIRROR_TRACKING"]:
                self.track()  # (again, in a forked child)
            trailer = self.storage.read_trailer(self.layout.segment)
            if trailer is None or trailer[0] != self.layout.segment.fingerprint:
                self.version, self.bitmap = None, bytearray()
                name = self.layout.segment.name
                raise FilterKeyMissing(f"Bloom filter {name!r}: key missing (mirror)")
            if (trailer[0], trailer[2]) != self.version:
                bitmap, version = self.storage.read_bitmap_versioned(self.layout.segment)
                self.bitmap, self.version = bytearray(bitmap), version
                self.loads += 1
            self.checked_at, self.checked_invalidations = time.monotonic(), seen
            return self.bitmap

    def current(self) -> bytearray | None:
        """The copy if it may answer now without asking Redis, else None (the async
        API then refreshes it in a worker thread)."""
        if self.version is None or time.monotonic() - self.checked_at >= self.refresh_seconds:
            return None
        return self.bitmap

    def test(self, flat: Sequence[int], k: int, bitmap: bytearray | None = None) -> list[bool]:
        bm = self._fresh() if bitmap is None else bitmap
        np = numpy_module()
        if np is not None and isinstance(flat, np.ndarray):
            bytes_ = np.frombuffer(bm, dtype=np.uint8)[(flat >> 3).astype(np.intp)]
            masks = (np.uint8(0x80) >> (flat & 7).astype(np.uint8)).astype(np.uint8)
            return (bytes_ & masks).astype(bool).reshape(-1, k).all(axis=1).tolist()
        return [
            all(bm[g >> 3] & (0x80 >> (g & 7)) for g in flat[i : i + k])
            for i in range(0, len(flat), k)
        ]

    def probe(self, h1: int, h2: int, bitmap: bytearray | None = None) -> bool:
        """One item, by its hash pair: stops at the first clear bit."""
        return self._probe(h1, h2, self._fresh() if bitmap is None else bitmap)

    def apply(self, flat: Sequence[int]) -> None:
        """Set bits this process just wrote to Redis (so its own adds are seen at once)."""
        bm = self.bitmap
        if not bm:
            return
        with self._lock:
            for g in flat.tolist() if hasattr(flat, "tolist") else flat:
                bm[g >> 3] |= 0x80 >> (g & 7)


_mirrors: dict[tuple[str, str, int], LocalMirror] = {}
_lock = threading.Lock()


def mirror_for(handle: Any, layout: Any = None) -> LocalMirror | None:
    """The mirror of ``layout`` (default: the handle's) when the filter is opted in
    and small enough, else None. One mirror per key name and geometry, so a
    handle that refreshed after a resize follows the new key."""
    config = get_config()
    layout = layout or handle.layout
    if layout.segment.name not in config["MIRROR_FILTERS"]:
        return None
    # e.g. counting filters (a bitmap copy would keep removed items), rotating
    # windows (the server's clock decides which slices are live), sharded filters
    if not isinstance(layout, Mirrorable):
        return None
    if layout.segment.num_bytes > config["MIRROR_MAX_BYTES"]:
        return None
    key = (handle.storage.alias, layout.segment.keys.bits, layout.segment.fingerprint)
    mirror = _mirrors.get(key)
    if mirror is None:
        with _lock:
            mirror = _mirrors.get(key)
            if mirror is None:
                mirror = _mirrors[key] = LocalMirror(
                    handle, float(config["MIRROR_REFRESH_SECONDS"]), layout
                )
                if config["MIRROR_TRACKING"]:
                    mirror.track()
    return mirror


def _after_fork_in_child() -> None:
    for mirror in list(_mirrors.values()):
        mirror.forked()


os.register_at_fork(after_in_child=_after_fork_in_child)


@forget_on_change
def forget_mirrors() -> None:
    with _lock:
        _mirrors.clear()
        tracking.stop_listeners()
