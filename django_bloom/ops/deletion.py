"""Deleting a filter: every Redis key it has, then its row. The admin's delete and
``bloom delete`` both come here, so they remove the same things."""

from __future__ import annotations

from django_bloom import counters, services
from django_bloom.exceptions import FilterNotFound
from django_bloom.models import BloomFilter
from django_bloom.ops import monitoring


def delete_filter(obj: BloomFilter) -> int:
    """Delete the filter of row ``obj``: its layout's keys (every generation, segment,
    sub-filter or slice), its rebuild, journal and validator-counter keys, a family's
    control key and every member key; then the row (its snapshots go with it). Returns
    the family member keys removed (0 for a plain filter).

    Raises ``FilterUnavailable`` (nothing deleted, the row stays) when Redis does not answer.
    """
    try:
        handle = services.get_handle(obj.name, refresh=True)
    except FilterNotFound:  # the row went meanwhile
        BloomFilter.objects.filter(pk=obj.pk).delete()
        return 0
    counters.forget(handle)  # a later flush must not recreate its counters key
    removed = handle.delete()
    monitoring.forget_stats()
    return removed or 0
