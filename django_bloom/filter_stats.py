"""``FilterStats``: a filter's figures, and ``Filter.stats`` that measures them.

A mixin of ``Filter`` (``filter.py``): needs ``meta``, ``layout`` and ``storage``.
The kind-specific measuring is the layout's (``Layout.measure``).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

from django_bloom import counters
from django_bloom.conf import get_config


@dataclass(frozen=True)
class FilterStats:
    name: str
    capacity: int
    error_rate: float
    num_bits: int
    num_hashes: int
    bits_set: int
    fill_ratio: float
    estimated_items: float
    current_fpr: float
    capacity_used: float
    memory_bytes: int | None
    key_bytes: int
    items_added: int
    # Bits of Redis memory per position: 1, or 4 for a counting filter (4x the memory;
    # then bits_set counts counters set).
    bits_per_position: int = 1
    # Kind-specific figures (``Layout.measure``): a rotating filter's window, a
    # scalable filter's sub-filters...
    # Its "capacity" and "num_bits" entries replace the row's (a grown filter holds more).
    details: dict[str, Any] = field(default_factory=dict)
    segments: int = 1  # Redis strings the filter spans (a sharded layout: more than one)

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        if math.isinf(data["estimated_items"]):
            data["estimated_items"] = None
        return data


class StatsAccess:
    """``stats()`` on the handle (mixed into Filter)."""

    def stats(self) -> FilterStats:
        meta = self.meta
        chunk_bytes = get_config()["STATS_CHUNK_BYTES"]
        measure = self.layout.measure(self.storage, chunk_bytes)
        bits, details, estimated = measure.bits_set, measure.details, measure.estimated_items
        num_bits = details.get("num_bits", meta.num_bits)
        capacity = details.get("capacity", meta.capacity)  # a grown filter: its live capacity
        return FilterStats(
            name=meta.name,
            capacity=capacity,
            error_rate=meta.error_rate,
            num_bits=num_bits,
            num_hashes=meta.num_hashes,
            bits_set=bits,
            fill_ratio=bits / num_bits,
            estimated_items=estimated,
            current_fpr=measure.fill_fpr,
            capacity_used=estimated / capacity,
            memory_bytes=measure.memory_bytes,
            key_bytes=self.layout.key_bytes,
            items_added=counters.items_added(self),
            bits_per_position=measure.bits_per_position,
            details=details,
            segments=len(self.layout.segments),
        )
