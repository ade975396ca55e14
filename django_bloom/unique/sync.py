"""Keep filters in step with the model fields they are bound to.

A binding ties a filter to ``app_label.Model.field``; declare bindings in
settings and they are connected once at start-up::

    DJANGO_BLOOM = {"BINDINGS": {
        "signup-emails": {"source": "auth.User.email", "normalizer": "email_ci",
                          "capacity": 1_000_000, "error_rate": 0.001},
    }}

Saved rows are added in ``transaction.on_commit``: a rolled-back save adds
nothing. If that add fails (Redis down), the filter is marked stale in the
database and the validator falls back to queries until ``rebuild``. Each
saved or deleted row also updates its ``BoundKey`` inside the same
transaction (see ``boundkeys``): the validator's exact confirmation.

``bulk_create`` and ``QuerySet.update`` send no signals: call
``add_rows(name, queryset)`` after them (keys and filter), or rebuild.
``add_rows(name, values)`` cannot tell which rows the values belong to: it
fills the filter and marks the binding's keys incomplete until the next
``rebuild_from_source``, which backfills them (and creates a declared
binding's filter on first use).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from django.apps import apps
from django.db import transaction
from django.db.models import F, Model, QuerySet
from django.db.models.signals import post_delete, post_save
from django.utils import timezone

from django_bloom.conf import get_config
from django_bloom.db_access import keyset_pages
from django_bloom.exceptions import (
    BloomError,
    FilterExists,
    FilterNotFound,
    FilterUnavailable,
)
from django_bloom.models import BloomFilter
from django_bloom.normalizers import get_normalizer
from django_bloom.unique import boundkeys

logger = logging.getLogger("django_bloom.unique.sync")

PROGRESS_EVERY_SECONDS = 1.0


@dataclass(frozen=True)
class Binding:
    filter_name: str
    app_label: str
    model_name: str
    field: str
    normalizer: str = ""

    @property
    def model(self) -> type[Model]:
        return apps.get_model(self.app_label, self.model_name)


def parse_source(source: str) -> tuple[str, str, str]:
    parts = source.split(".")
    if len(parts) != 3 or not all(parts):
        raise ValueError(f"source {source!r} must look like app_label.Model.field")
    return parts[0], parts[1], parts[2]


def declared_bindings() -> list[Binding]:
    out = []
    for name, spec in (get_config().get("BINDINGS") or {}).items():
        app_label, model_name, field = parse_source(spec["source"])
        out.append(Binding(name, app_label, model_name, field, spec.get("normalizer", "")))
    return out


def binding_source(binding: Binding) -> str:
    return f"{binding.app_label}.{binding.model_name}.{binding.field}"


def declared_binding(name: str) -> Binding | None:
    """The BINDINGS entry called ``name``, if any."""
    return next((b for b in declared_bindings() if b.filter_name == name), None)


_connected: dict[str, Callable] = {}


def connect_bindings() -> None:
    """Connect post_save receivers for every declared binding (idempotent)."""
    for binding in declared_bindings():
        bind(binding)


def bind(binding: Binding) -> None:
    model = binding.model

    def on_save(
        sender: Any,
        instance: Model,
        created: bool,
        raw: bool = False,
        using: str = "default",
        update_fields: Any = None,
        **kwargs: Any,
    ) -> None:
        if update_fields is not None and binding.field not in update_fields:
            return  # the bound value did not change
        boundkeys.on_save(binding, instance, using)  # in the saving transaction
        if raw:  # loaddata: the filter is not touched; rebuild afterwards
            return
        value = getattr(instance, binding.field, None)
        if value in (None, ""):
            return
        transaction.on_commit(lambda: _add_committed(binding, [value]), using=using)

    def on_delete(sender: Any, instance: Model, using: str = "default", **kwargs: Any) -> None:
        boundkeys.on_delete(binding, instance, using)  # a filter cannot forget; the key can

    uid = f"django_bloom.unique.sync:{binding.filter_name}"
    post_save.connect(on_save, sender=model, dispatch_uid=uid, weak=False)
    post_delete.connect(on_delete, sender=model, dispatch_uid=uid, weak=False)
    _connected[uid] = on_save


def _add_committed(binding: Binding, values: list[Any]) -> None:
    from django_bloom.services import get_filter

    try:
        _add_values(get_filter(binding.filter_name), values)
    except FilterNotFound:
        logger.warning(
            "bound filter %r does not exist yet; run `bloom rebuild`", binding.filter_name
        )
    except FilterUnavailable as exc:
        mark_stale(binding.filter_name, exc)


def mark_stale(name: str, exc: Exception) -> None:
    """The filter missed a write: make readers fall back to the database."""
    from django_bloom.services import forget_filters

    logger.error("filter %r missed a write (%s); marked stale until rebuilt", name, exc)
    BloomFilter.objects.filter(name=name).update(
        stale_marks=F("stale_marks") + 1, rebuild_error=str(exc)
    )
    forget_filters(name)


def add_rows(name: str, values: Iterable[Any] | QuerySet) -> int:
    """Add a queryset's rows (or bare values), normalised: call after bulk_create/update.

    A queryset also writes the rows' keys of a declared binding. Bare values
    cannot: the binding's keys are marked incomplete until the next rebuild.
    """
    from django_bloom.services import get_filter

    handle = get_filter(name)
    if isinstance(values, QuerySet):
        _, _, field = parse_source(handle.meta.source)
        binding = declared_binding(name)
        if binding is not None:
            boundkeys.upsert_queryset(binding, values)
        values = values.values_list(field, flat=True)
    else:
        boundkeys.mark_incomplete(name)
    return _add_values(handle, values)


def _add_values(handle: Any, values: Iterable[Any]) -> int:
    normalize = get_normalizer(handle.meta.normalizer or None)
    items = [normalize(str(v)) for v in values if v not in (None, "")]
    return handle.without_normalizer.add_many(items, count=True)


def source_items(meta: BloomFilter) -> tuple[Iterator[str], int]:
    """(normalised values of the bound field, row count) streamed in chunks."""
    if meta.kind == BloomFilter.Kind.BLOCKLIST and not meta.source:
        from django_bloom.ipblock.service import iter_filter_items
        from django_bloom.models import BlockedEntry

        total = BlockedEntry.objects.active().filter(list_name=meta.name).count()
        return iter_filter_items(meta.name), total
    if not meta.source:
        raise ValueError(f"filter {meta.name!r} has no bound source (app_label.Model.field)")
    app_label, model_name, field = parse_source(meta.source)
    try:
        model = apps.get_model(app_label, model_name)
    except LookupError:
        raise ValueError(f"source model {app_label}.{model_name} is not installed") from None
    normalize = get_normalizer(meta.normalizer or None)
    rows = model._base_manager.exclude(**{f"{field}__isnull": True})  # soft-deleted rows too
    total = rows.count()

    def stream() -> Iterator[str]:
        """Keyset pages (``db_access``): no cursor stays open while the rebuild writes its
        progress (on SQLite: "database is locked" at once, 40,000 rows)."""
        for page in keyset_pages(rows, field):
            yield from (normalize(str(value)) for _pk, value in page if value != "")

    return stream(), total


def rebuild_from_source(
    name_or_filter: Any, progress: Callable[[int], None] | None = None, **resize: Any
) -> int:
    """Refill a filter from its bound source; records progress on its row.

    Readers keep using the old bits until the atomic swap; writes that arrive
    meanwhile are journaled and replayed (see ``Filter.rebuild``).
    """
    from django_bloom.services import Filter, get_filter

    if isinstance(name_or_filter, Filter):
        handle = name_or_filter
    else:
        ensure_bound_filter(name_or_filter)
        handle = get_filter(name_or_filter)
    meta = handle.meta
    items, total = source_items(meta)
    rows = BloomFilter.objects.filter(pk=meta.pk)
    rows.update(
        rebuild_state=BloomFilter.RebuildState.RUNNING,
        rebuild_done=0,
        rebuild_total=total,
        rebuild_error="",
    )
    last = [0.0]

    def report(done: int) -> None:
        now = time.monotonic()
        if now - last[0] >= PROGRESS_EVERY_SECONDS or done == total:
            rows.update(rebuild_done=done)
            last[0] = now
        if progress is not None:
            progress(done)

    binding = declared_binding(meta.name)
    if binding is not None and meta.source != binding_source(binding):
        binding = None  # the row was re-pointed: its keys would describe another field
    try:
        count = handle.without_normalizer.rebuild(items, progress=report, **resize)
    except (BloomError, Exception) as exc:
        rows.update(
            rebuild_state=BloomFilter.RebuildState.FAILED,
            rebuild_error=f"{type(exc).__name__}: {exc}",
        )
        raise
    # The new bits are live: from here on nothing reports the rebuild failed.
    rows.update(
        rebuild_state=BloomFilter.RebuildState.DONE,
        rebuild_done=count,
        last_rebuild_at=timezone.now(),
    )
    rows.filter(stale_cleared__gte=F("stale_marks")).update(rebuild_error="")  # keep a new miss's
    if binding is not None:
        try:
            boundkeys.backfill(binding)
        except Exception as exc:  # noqa: BLE001 - the bits are good; the keys stay incomplete
            # The validator keeps its case-insensitive fallback query and check W010 asks
            # for another rebuild until a backfill completes.
            logger.warning("filter %r rebuilt; its bound keys were not: %s", meta.name, exc)
    from django_bloom.services import forget_filters

    forget_filters(meta.name)
    return count


def ensure_bound_filters() -> list[str]:
    """Create the filters declared in BINDINGS that do not exist yet; their names."""
    return [name for name in (get_config().get("BINDINGS") or {}) if ensure_bound_filter(name)]


def ensure_bound_filter(name: str) -> bool:
    """Create the filter of the BINDINGS entry ``name`` if it has no row yet; True if created."""
    from django_bloom.services import create_filter

    spec = (get_config().get("BINDINGS") or {}).get(name)
    if spec is None or BloomFilter.objects.filter(name=name).exists():
        return False
    try:
        create_filter(
            name,
            capacity=spec.get("capacity", 1_000_000),
            error_rate=spec.get("error_rate", 0.01),
            kind=BloomFilter.Kind.UNIQUE,
            source=spec["source"],
            normalizer=spec.get("normalizer", ""),
            description=spec.get("description", ""),
        )
    except FilterExists:  # another process created it meanwhile
        return False
    return True
