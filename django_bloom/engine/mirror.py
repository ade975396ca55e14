"""Local mirror: an in-process copy of a read-mostly filter's bitmap.

Opt in per filter with ``DJANGO_BLOOM["MIRROR_FILTERS"]``. Reads then cost no
Redis round trip. The copy is loaded with one GET (bitmap and trailer
together, so they always match) and re-checked at most every
``MIRROR_REFRESH_SECONDS``: one small GETRANGE of the trailer, whose write
stamp and counter change on every add, clear and rebuild; only then is the
bitmap fetched again. Writes made by this process are applied to the copy at once
(also while another thread reloads it: a write made during a reload is applied
to the copy being loaded too). Writes by other processes show up within
milliseconds where Redis offers client-side caching: Redis pushes an
invalidation for the filter's key to this process's listener
(engine/transport/tracking.py) and the next read, sync or async, re-checks the
trailer. Otherwise (refused, or the listener is reconnecting) they show up
within the refresh interval, the staleness you accept by opting in; the
interval applies in every case, so the listener can only make a copy fresher.

A copy's version is the server's identity (``run_id`` and ``master_replid``,
read by ``INFO`` in the same round trip as the trailer or the bitmap) with the
fingerprint, the write stamp and the write counter. A key back in time (a Redis
restarted from an older RDB, a promoted replica that missed writes: a new server
identity; a key RESTOREd from an older DUMP: the same) counts again from an older
value and may come back to the copy's counter with other bits, but every write
also stamps the trailer with 24 random bits (``format.new_stamp``, in the same
command), which the writes after a rewind draw again by a 1 in 16.7 million
chance. (A server that refuses ``INFO`` leaves stamp and counter to decide.)

Filters larger than ``MIRROR_MAX_BYTES`` are not mirrored (reads go to Redis
as usual). A lost key drops the copy and
raises ``FilterKeyMissing``, as a Redis read would.
"""

from __future__ import annotations

import os
import re
import threading
import time
from collections.abc import Sequence
from typing import Any

from redis.exceptions import ResponseError

from django_bloom.conf import forget_on_change, get_config
from django_bloom.engine import hashing
from django_bloom.engine.format import STAMP_AND_COUNTER, TRAILER, TRAILER_BYTES
from django_bloom.engine.kinds.capabilities import Mirrorable
from django_bloom.engine.transport import tracking
from django_bloom.engine.transport.packing import arguments, header
from django_bloom.exceptions import FilterKeyMissing

# The server's identity: a restart changes run_id, a promotion or a resync master_replid.
_IDENTITY = header(2, "INFO") + arguments("server") + header(2, "INFO") + arguments("replication")
_IDENTITY_FIELDS = re.compile(rb"^(?:run_id|master_replid):(\w+)", re.MULTILINE)


def _server_identity(conn: Any) -> bytes | None:
    """The two INFO replies of ``_IDENTITY`` -> run_id and master_replid (None: refused)."""
    found = b""
    for _ in range(2):
        try:
            info = conn.read_response()
        except ResponseError:  # INFO refused (ACL, a proxy): read the other reply too
            found = None
            continue
        if found is not None:
            text = info.encode() if isinstance(info, str) else bytes(info)
            found += b":".join(_IDENTITY_FIELDS.findall(text)) + b";"
    return found or None


class LocalMirror:
    def __init__(self, handle: Any, refresh_seconds: float, layout: Any):
        self.layout = layout
        self.storage = handle.storage
        self.refresh_seconds = refresh_seconds
        self.bitmap = bytearray()
        # (server identity, fingerprint, write stamp and counter) of the copy; None: not loaded
        self.version: tuple[bytes | None, int, bytes] | None = None
        self.checked_at = float("-inf")
        self.invalidations = 0  # bumped by the tracking listener's thread
        self.checked_invalidations = -1  # ``invalidations`` when last checked
        self.listener: tracking.Listener | None = None  # this process's, once it watches
        self.loads = 0
        self._lock = threading.Lock()  # one check or reload at a time (it holds a round trip)
        self._bits_lock = threading.Lock()  # the copy's bits; never held over a round trip
        self._during_load: list[list[int]] | None = None  # own writes while a reload runs
        self._probe = layout.prober()

    def invalidate(self) -> None:
        """Redis says the key changed (or may have): re-check on the next read."""
        self.invalidations += 1

    def track(self) -> None:
        """Ask this process's listener (transport/tracking.py) for the key's invalidations."""
        self.listener = tracking.listener_for(self.storage.alias, self.storage.make_connection)
        self.listener.watch(self.layout.segment.keys.bits, self.invalidate)

    def forked(self) -> None:
        """In a forked child: the parent's listener thread is gone. Re-check on the next
        read, which registers with the child's own listener."""
        self.listener = None
        self.invalidations += 1

    def _read(self, command: bytes) -> tuple[bytes | None, Any]:
        """(server identity, the reply of ``command``): one round trip to the key's server."""

        def read(conn: Any) -> tuple[bytes | None, Any]:
            return _server_identity(conn), conn.read_response()

        return self.storage._send(_IDENTITY + command, read, key=self.layout.segment.keys.bits)

    def _check(self) -> tuple[bytes | None, int, bytes] | None:
        """The key's version now (GETRANGE of the trailer), None when the key is absent."""
        segment = self.layout.segment
        key, offset = segment.keys.bits, str(segment.trailer_offset)
        server, raw = self._read(header(4, "GETRANGE", key, offset, "-1"))
        if raw is None or len(raw) != TRAILER_BYTES:
            return None
        return server, TRAILER.unpack(raw)[0], raw[STAMP_AND_COUNTER]

    def _load(self) -> None:
        """GET the bitmap and trailer; own writes made meanwhile are applied to it too.
        The writes are handed over and the new bitmap installed under one hold of the
        bits lock: an ``apply`` sees either the old copy and the list, or the new copy."""
        segment = self.layout.segment
        with self._bits_lock:
            self._during_load = []
        bitmap = None
        try:
            server, raw = self._read(header(2, "GET", segment.keys.bits))
            whole = raw is not None and len(raw) == segment.key_length
            trailer = raw[segment.num_bytes :] if whole else b""
            fingerprint = TRAILER.unpack(trailer)[0] if whole else None
            if fingerprint != segment.fingerprint:  # no key, or not this filter's
                raise FilterKeyMissing(f"Bloom filter {segment.name!r}: key missing (mirror)")
            bitmap = bytearray(raw[: segment.num_bytes])
        finally:
            with self._bits_lock:
                written, self._during_load = self._during_load or [], None
                if bitmap is not None:
                    for positions in written:
                        hashing.set_bits(bitmap, positions)
                    self.bitmap = bitmap
                    self.version = (server, fingerprint, trailer[STAMP_AND_COUNTER])
        self.loads += 1

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
            if self.listener is None and get_config()["MIRROR_TRACKING"]:
                self.track()  # (again, in a forked child)
            version = self._check()
            if version is None or version[1] != self.layout.segment.fingerprint:
                with self._bits_lock:
                    self.version, self.bitmap = None, bytearray()
                name = self.layout.segment.name
                raise FilterKeyMissing(f"Bloom filter {name!r}: key missing (mirror)")
            if version != self.version:
                self._load()
            self.checked_at, self.checked_invalidations = time.monotonic(), seen
            return self.bitmap

    def current(self) -> bytearray | None:
        """The copy if it may answer now without asking Redis, else None (the async
        API then refreshes it in a worker thread): as ``_fresh`` decides, an
        invalidation included."""
        if (
            self.version is None
            or self.invalidations != self.checked_invalidations
            or time.monotonic() - self.checked_at >= self.refresh_seconds
        ):
            return None
        return self.bitmap

    def test(self, flat: Sequence[int], k: int, bitmap: bytearray | None = None) -> list[bool]:
        bm = self._fresh() if bitmap is None else bitmap
        np = hashing.numpy_module()
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
        """Set bits this process just wrote to Redis (so its own adds are seen at once).
        A reload in flight may have read the key before this write: it gets them too."""
        positions = flat.tolist() if hasattr(flat, "tolist") else flat
        with self._bits_lock:
            if self._during_load is not None:
                self._during_load.append(positions)
            if self.bitmap:
                hashing.set_bits(self.bitmap, positions)


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
