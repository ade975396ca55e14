"""Fill history of filters: snapshots for the admin trend chart.

Minimal version written for ``manage.py bloom stats --record`` (cron); the admin
work may extend this module.
"""

from __future__ import annotations

from typing import Any

from django_bloom.models import FilterSnapshot


def record_snapshot(handle: Any, stats: Any = None) -> FilterSnapshot:
    """Store one point of ``handle``'s history from ``Filter.stats()``.

    Raises ``FilterUnavailable`` (and writes nothing) when the filter cannot be read.
    Pass ``stats`` when they were just computed, to avoid a second BITCOUNT.
    """
    stats = stats if stats is not None else handle.stats()
    estimated = stats.estimated_items
    return FilterSnapshot.objects.create(
        bloom_filter=handle.meta,
        bits_set=stats.bits_set,
        # A completely full bitmap estimates infinity; store the bit count as a floor.
        estimated_items=estimated if estimated != float("inf") else float(stats.num_bits),
        fill_ratio=stats.fill_ratio,
        current_fpr=stats.current_fpr,
        items_added=stats.items_added,
        memory_bytes=stats.memory_bytes,
    )
