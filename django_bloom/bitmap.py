"""Whole-bitmap access for tools (``bloom verify``), on the handle.

A mixin of ``Filter``: the tools ask the filter, never its storage or layout.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any

from django_bloom.engine import hashers, hashing
from django_bloom.engine.kinds.capabilities import refuse_rebuild
from django_bloom.exceptions import FilterKeyMissing


class BitmapAccess:
    """Needs ``_bound`` (layout), ``storage``, ``hasher``, ``encoder`` and ``name``."""

    @property
    def bitmap_bytes(self) -> int:
        return sum(s.num_bytes for s in self._bound.layout.segments)

    def build_running(self) -> bool:
        """Whether a rebuild holds this filter's build lock now."""
        return self.storage.build_running(self._bound.layout.segment)

    def live_fingerprint(self) -> int:
        """The key's trailer fingerprint (every segment's checked; the first's returned);
        FilterKeyMissing when a key is gone or not ours."""
        layout = self._bound.layout
        for segment in layout.segments:
            trailer = self.storage.read_trailer(segment)
            if trailer is None or trailer[0] != segment.fingerprint:
                raise FilterKeyMissing(
                    f"Bloom filter {self.name!r}: its Redis key {segment.keys.bits!r} is missing "
                    "or is not this filter's; rebuild it (verify only checks a key that is there)"
                )
        return layout.segment.fingerprint

    def build_bitmap(
        self, items: Iterable[Any], progress: Callable[[int], None] | None = None
    ) -> tuple[bytes | bytearray, int]:
        """(bitmap, items read): the bits ``items`` set, built in process."""
        refuse_rebuild(self._bound.layout)
        return hashers.build_bitmap(
            self.hasher, items, self._bound.layout.builder(), self.encoder, progress
        )

    def item_positions(self, items: Iterable[Any]) -> Iterator[list[int]]:
        """Each item's bit positions, item after item."""
        positions = self._bound.layout.positioner()
        for chunk in hashers.chunked(items, hashers.BUILD_CHUNK):
            for h1, h2 in hashing.pairs_of(self.hasher.item_digests(chunk, self.encoder)):
                yield positions(h1, h2)
