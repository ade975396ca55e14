"""Local mirror: an in-process copy of a read-mostly filter's bitmap.

Opt in per filter with ``DJANGO_BLOOM["MIRROR_FILTERS"]``. Reads then cost no
Redis round trip. The copy is loaded with one GET (bitmap and trailer
together, so they always match) and re-checked at most every
``MIRROR_REFRESH_SECONDS``: one small GETRANGE of the trailer, whose write
counter changes on every add, clear and rebuild; only then is the bitmap
fetched again. Writes made by this process are applied to the copy at once;
writes by other processes show up within the refresh interval — that is the
staleness you accept by opting in. Filters larger than ``MIRROR_MAX_BYTES``
are not mirrored (reads go to Redis as usual). A lost key drops the copy and
raises ``FilterKeyMissing``, as a Redis read would.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from typing import Any

from django_bloom.conf import forget_on_change, get_config
from django_bloom.engine.hashing import numpy_module
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
        self.loads = 0
        self._lock = threading.Lock()
        self._probe = layout.prober()

    def _fresh(self) -> bytearray:
        now = time.monotonic()
        if now - self.checked_at < self.refresh_seconds:
            return self.bitmap
        with self._lock:
            if now - self.checked_at < self.refresh_seconds:
                return self.bitmap
            trailer = self.storage.read_trailer(self.layout.segment)
            if trailer is None or trailer[0] != self.layout.fingerprint:
                self.version, self.bitmap = None, bytearray()
                raise FilterKeyMissing(f"Bloom filter {self.layout.name!r}: key missing (mirror)")
            if (trailer[0], trailer[2]) != self.version:
                bitmap, version = self.storage.read_bitmap_versioned(self.layout.segment)
                self.bitmap, self.version = bytearray(bitmap), version
                self.loads += 1
            self.checked_at = time.monotonic()
            return self.bitmap

    def test(self, flat: Sequence[int], k: int) -> list[bool]:
        bm = self._fresh()
        np = numpy_module()
        if np is not None and isinstance(flat, np.ndarray):
            bytes_ = np.frombuffer(bm, dtype=np.uint8)[(flat >> 3).astype(np.intp)]
            masks = (np.uint8(0x80) >> (flat & 7).astype(np.uint8)).astype(np.uint8)
            return (bytes_ & masks).astype(bool).reshape(-1, k).all(axis=1).tolist()
        return [
            all(bm[g >> 3] & (0x80 >> (g & 7)) for g in flat[i : i + k])
            for i in range(0, len(flat), k)
        ]

    def probe(self, h1: int, h2: int) -> bool:
        """One item, by its hash pair: stops at the first clear bit."""
        return self._probe(h1, h2, self._fresh())

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
    if len(layout.segments) != 1:  # a sharded filter: not mirrored, reads go to Redis
        return None
    if layout.num_bytes > config["MIRROR_MAX_BYTES"]:
        return None
    key = (handle.storage.alias, layout.keys.bits, layout.fingerprint)
    mirror = _mirrors.get(key)
    if mirror is None:
        with _lock:
            mirror = _mirrors.setdefault(
                key, LocalMirror(handle, float(config["MIRROR_REFRESH_SECONDS"]), layout)
            )
    return mirror


@forget_on_change
def forget_mirrors() -> None:
    with _lock:
        _mirrors.clear()
