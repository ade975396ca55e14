"""Whole-bitmap access for tools (``bloom verify`` and its repair), on the handle.

A mixin of ``Filter``: the tools ask the filter, never its storage or layout.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from django_bloom.engine import hashers, hashing
from django_bloom.exceptions import FilterKeyMissing


class BitmapAccess:
    """Needs ``_bound`` (layout), ``storage``, ``hasher``, ``encoder`` and ``name``."""

    @property
    def bitmap_bytes(self) -> int:
        return self._bound.layout.num_bytes

    def build_running(self) -> bool:
        """Whether a rebuild holds this filter's build lock now."""
        return self.storage.build_running(self._bound.layout.segment)

    def live_fingerprint(self) -> int:
        """The key's trailer fingerprint; FilterKeyMissing when the key is gone or not ours."""
        layout = self._bound.layout
        trailer = self.storage.read_trailer(layout.segment)
        if trailer is None or trailer[0] != layout.fingerprint:
            raise FilterKeyMissing(
                f"Bloom filter {self.name!r}: its Redis key is missing or is not this filter's; "
                "rebuild it (verify only checks a key that is there)"
            )
        return trailer[0]

    def read_bitmap_range(self, start: int, end: int) -> bytes:
        """Bitmap bytes ``start`` to ``end`` inclusive (one GETRANGE)."""
        return self.storage.read_range(self._bound.layout.segment, start, end)

    def build_bitmap(
        self, items: Iterable[Any], progress: Callable[[int], None] | None = None
    ) -> tuple[bytes | bytearray, int]:
        """(bitmap, items read): the bits ``items`` set, built in process."""
        return hashers.build_bitmap(
            self.hasher, items, self._bound.layout.builder(), self.encoder, progress
        )

    def set_bits(self, positions: list[int]) -> None:
        """Set single bits (a repair): SET u1 each, the trailer's fingerprint checked."""
        single = dataclasses.replace(self._bound.layout.segment, num_hashes=1)
        self.storage.set(single, positions)

    def item_positions(self, items: Iterable[Any]) -> Iterator[list[int]]:
        """Each item's bit positions, item after item."""
        positions = self._bound.layout.positioner()
        for chunk in hashers.chunked(items, hashers.BUILD_CHUNK):
            for h1, h2 in hashing.pairs_of(self.hasher.item_digests(chunk, self.encoder)):
                yield positions(h1, h2)
