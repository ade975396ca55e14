"""The standard kind: k bits anywhere in one bitmap (enhanced double hashing).

``Bitmap`` is those positions alone, with no capability: the counting, rotating and
sharded kinds place their bits the same way and opt into what they can do themselves.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from django.utils.translation import gettext_lazy

from django_bloom.engine import hashing, sizing
from django_bloom.engine.kinds.base import Layout
from django_bloom.engine.kinds.capabilities import (
    ClusterReady,
    FamilyTemplate,
    Mergeable,
    Mirrorable,
    Planned,
    Rebuildable,
    Splittable,
)


class Bitmap(Layout):
    """k positions anywhere in the segment's m bits."""

    @classmethod
    def geometry(
        cls, capacity: int, error_rate: float, options: Mapping[str, Any] | None = None
    ) -> tuple[int, int]:
        return sizing.standard_geometry(capacity, error_rate)

    def positioner(self) -> Callable[[int, int], list[int]]:
        return hashing.standard_positioner(self.segment.num_bits, self.segment.num_hashes)

    def position_array(self, digests: bytes) -> Any:
        s = self.segment
        return hashing.standard_position_array(digests, s.num_bits, s.num_hashes)


class StandardLayout(
    Bitmap, Rebuildable, Mirrorable, Planned, FamilyTemplate, ClusterReady, Splittable, Mergeable
):
    layout_name = "standard"
    description = gettext_lazy("k bits anywhere in one bitmap (the default)")

    @classmethod
    def oversize(cls, num_bits: int, max_segment_bytes: int) -> tuple[str, dict[str, Any]] | None:
        """Too big for one Redis string: the same bits split over enough segments."""
        return "sharded", {"segments": sizing.segments_needed(num_bits, max_segment_bytes)}

    def prober(self) -> hashing.Prober:
        return hashing.standard_prober(self.segment.num_bits, self.segment.num_hashes)
