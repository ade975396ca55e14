"""``Filter.rebuild``: replace a filter's content with items, optionally resized.

A mixin of ``Filter`` (``filter.py``; the public ``rebuild``, one of the item operations,
is in ``normalizing.py``): needs ``meta``, ``member``, ``name``, ``storage``, ``encoder``
and ``_bind``. The protocol it drives (build lock, journal, build key, swap) runs through
the layout on the storage (``engine/builds.py``).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.utils import timezone

from django_bloom import counters
from django_bloom.engine import sizing
from django_bloom.engine.kinds.capabilities import build_and_swap, refuse_rebuild
from django_bloom.exceptions import OperationNotSupported
from django_bloom.models import BloomFilter
from django_bloom.registry import (
    check_size,
    forget_filters,
    geometry_of,
    hasher_of,
    layout_for,
    new_generation,
)

# The fields a rebuild owns: it saves these only (a write that failed meanwhile
# may have marked the row stale).
_REBUILT_FIELDS = [
    "capacity",
    "error_rate",
    "num_bits",
    "num_hashes",
    "generation",
    "last_rebuild_at",
    "updated_at",
]


class RebuildAccess:
    """The body of ``rebuild()`` (mixed into Filter); the public ``rebuild`` is one of the
    item operations (``normalizing.py``), which passes the items through the row's
    normaliser, or not (``without_normalizer``), then calls ``_rebuild``."""

    def _rebuild(self, items: Iterable[Any], **resize: Any) -> int:
        """``rebuild`` of items as they are (``capacity``, ``error_rate``, ``progress``
        as there)."""
        capacity, error_rate = resize.get("capacity"), resize.get("error_rate")
        progress = resize.get("progress")
        if self.member is not None:
            raise OperationNotSupported(
                f"family {self.name!r}: a member cannot be rebuilt (writers of other members "
                "would race a swap, and a resize would orphan every member key). Clear the "
                "member (its key goes) and add its items again."
            )
        capacity = self.meta.capacity if capacity is None else capacity
        error_rate = self.meta.error_rate if error_rate is None else error_rate
        sizing.validate_sizing(capacity, error_rate)
        new_meta = BloomFilter.objects.get(pk=self.meta.pk)
        live = layout_for(new_meta)  # the row's key now, whatever this handle holds
        refuse_rebuild(live)
        old_geometry = geometry_of(new_meta)
        new_meta.capacity, new_meta.error_rate = capacity, error_rate
        new_meta.derive_geometry()
        check_size(new_meta)
        if geometry_of(new_meta) != old_geometry:
            # Another geometry gets another key name: handles that still hold
            # the old geometry then miss (FilterKeyMissing, and they refresh)
            # instead of setting bits at the old positions in the new bitmap.
            new_meta.generation = new_generation()
        new_layout = layout_for(new_meta)
        count = build_and_swap(
            self.storage,
            live,
            new_layout,
            lambda: self._build(new_meta, new_layout, items, progress),
            self.name,
        )
        new_meta.last_rebuild_at = timezone.now()
        # At once: the swap has retired the old key name. Only the fields this
        # rebuild owns: a write that failed meanwhile may have marked the row stale.
        new_meta.save(update_fields=_REBUILT_FIELDS)
        # Writes missed before this rebuild began are in the new bits (their rows were
        # committed before the items were read); one missed since keeps the filter stale.
        marks = new_meta.stale_marks
        BloomFilter.objects.filter(pk=new_meta.pk, stale_cleared__lt=marks).update(
            stale_cleared=marks
        )
        new_meta.refresh_from_db(fields=["stale_marks", "stale_cleared", "rebuild_error"])
        forget_filters(self.name)
        self._bind(new_meta)
        counters.set_added(self, count)
        return count

    def _build(self, meta, layout, items, progress) -> int:
        """Fill the new layout's build key(s) (``Rebuildable.fill_build``: a bitmap built
        in process and uploaded, or the kind's own commands)."""
        return layout.fill_build(self.storage, hasher_of(meta), items, self.encoder, progress)
