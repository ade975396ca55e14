"""The standard layout: k bits anywhere in the bitmap (enhanced double hashing)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.utils.translation import gettext_lazy

from django_bloom.engine import hashing, sizing
from django_bloom.engine.kinds.base import Layout


class StandardLayout(Layout):
    layout_name = "standard"
    cluster_ready = True
    description = gettext_lazy("k bits anywhere in one bitmap (the default)")
    family_members = True

    @classmethod
    def geometry(cls, capacity: int, error_rate: float) -> tuple[int, int]:
        return sizing.standard_geometry(capacity, error_rate)

    @classmethod
    def oversize(cls, num_bits: int, max_segment_bytes: int) -> tuple[str, dict[str, Any]] | None:
        """Too big for one Redis string: the same bits split over enough segments."""
        return "sharded", {"segments": sizing.segments_needed(num_bits, max_segment_bytes)}

    def positioner(self) -> Callable[[int, int], list[int]]:
        return hashing.standard_positioner(self.num_bits, self.num_hashes)

    def position_array(self, digests: bytes) -> Any:
        return hashing.standard_position_array(digests, self.num_bits, self.num_hashes)

    def prober(self) -> hashing.Prober:
        return hashing.standard_prober(self.num_bits, self.num_hashes)
