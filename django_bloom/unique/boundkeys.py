"""Bound keys: the validator's exact, indexed confirmation of a "maybe".

A binding's filter can only say "maybe"; the database must then say whether a
row's *normalised* value equals the normalised input. SQL cannot normalise
(NFKC, casefold ``ß`` -> ``ss``, Unicode case on SQLite), so each bound row
keeps one ``BoundKey``: (binding, object_pk, BLAKE2b-128 of its normalised
value). The confirmation is one query on the (binding, digest) index.

Keys are written inside the row's own transaction (the binding's post_save
and post_delete receivers, see ``sync.bind``), so a committed row always has
its key and a rolled-back one never does. Rows written without signals
(before the binding existed, ``bulk_create``, ``QuerySet.update``, raw SQL)
are covered by ``backfill`` (run by ``rebuild_from_source`` / ``bloom
rebuild``), which then marks the binding's keys complete. Until they are, the
validator falls back to a case-insensitive query over every candidate and
system check W010 asks for the rebuild.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from typing import Any

from django.core.exceptions import ValidationError
from django.db import router
from django.db.models import Exists, F, Model, OuterRef, QuerySet
from django.utils import timezone

from django_bloom.db_access import keyset_pages, write_transaction
from django_bloom.models import BoundKey, BoundKeyState
from django_bloom.normalizers import get_normalizer

CHUNK_SIZE = 1000  # rows per locked step (and per IN list: well under SQLite's limits)


def digest(normalized: str) -> str:
    """Hex BLAKE2b-128 of a normalised value (lone surrogates kept, never an error)."""
    data = normalized.encode("utf-8", "surrogatepass")
    return hashlib.blake2b(data, digest_size=16).hexdigest()


def normalizer_name(spec: Any) -> str:
    """One spelling per normaliser: '' for identity."""
    return "" if spec in (None, "", "identity") else str(spec)


def source_label(model: type[Model], field: str) -> str:
    return f"{model._meta.label_lower}.{field}"


def _key_rows(binding: Any, rows: Iterable[tuple[Any, Any]]) -> tuple[list[BoundKey], list[str]]:
    """(keys to upsert, object pks whose value is empty) for (pk, value) pairs."""
    normalize = get_normalizer(binding.normalizer or None)
    keys, empty = [], []
    for pk, value in rows:
        if value in (None, ""):
            empty.append(str(pk))
        else:
            keys.append(
                BoundKey(
                    binding=binding.filter_name,
                    object_pk=str(pk),
                    digest=digest(normalize(str(value))),
                )
            )
    return keys, empty


def upsert(binding: Any, rows: Iterable[tuple[Any, Any]], using: str) -> None:
    """Write the keys of (pk, value) pairs: one INSERT .. ON CONFLICT UPDATE (+ a DELETE)."""
    keys, empty = _key_rows(binding, rows)
    manager = BoundKey.objects.db_manager(using)
    if keys:
        manager.bulk_create(
            keys,
            update_conflicts=True,
            unique_fields=["binding", "object_pk"],
            update_fields=["digest"],
        )
    if empty:
        manager.filter(binding=binding.filter_name, object_pk__in=empty).delete()


def on_save(binding: Any, instance: Model, using: str) -> None:
    """post_save: the saved row's key, in the saving transaction."""
    upsert(binding, [(instance.pk, getattr(instance, binding.field, None))], using)


def on_delete(binding: Any, instance: Model, using: str) -> None:
    """post_delete: drop the row's key, in the deleting transaction."""
    BoundKey.objects.db_manager(using).filter(
        binding=binding.filter_name, object_pk=str(instance.pk)
    ).delete()


def upsert_queryset(binding: Any, rows: QuerySet) -> int:
    """Keys for a queryset's rows (after ``bulk_create``/``update``), in locked chunks.

    Each chunk is read ``FOR UPDATE`` and its keys written in one transaction,
    so a concurrent save of the same row is ordered with it: the last
    writer's value wins, never an older read. On SQLite (no row locks) the chunk's
    transaction takes the database's write lock first (``db_access.write_transaction``),
    which orders it with concurrent saves the same way.
    """
    model = binding.model
    if rows.query.is_sliced:
        rows = model._base_manager.filter(pk__in=list(rows.values_list("pk", flat=True)))
    using = rows.db
    rows = rows.order_by("pk")
    last, done = None, 0
    while True:
        with write_transaction(using):
            page = rows if last is None else rows.filter(pk__gt=last)
            batch = list(page.select_for_update().values_list("pk", binding.field)[:CHUNK_SIZE])
            if not batch:
                return done
            upsert(binding, batch, using)
        last = batch[-1][0]
        done += len(batch)


def backfill(binding: Any) -> int:
    """Replace the binding's keys from every source row, then mark them complete.

    Not complete if keys went incomplete meanwhile (``mark_incomplete`` bumped
    the revision, e.g. rows updated behind the pass): the next backfill will.
    """
    model = binding.model
    using = router.db_for_write(model)
    states = BoundKeyState.objects.db_manager(using)
    state, _ = states.get_or_create(
        binding=binding.filter_name, defaults={"source": source_label(model, binding.field)}
    )
    done = upsert_queryset(binding, model._base_manager.db_manager(using).all())
    _drop_orphans(binding, using)
    states.filter(pk=state.pk, revision=state.revision).update(
        source=source_label(model, binding.field),
        normalizer=normalizer_name(binding.normalizer),
        complete_at=timezone.now(),
    )
    return done


def _drop_orphans(binding: Any, using: str) -> None:
    """Delete keys whose row is gone (deleted without signals), a chunk at a time."""
    model = binding.model
    pk_field = model._meta.pk
    keys = BoundKey.objects.db_manager(using).filter(binding=binding.filter_name)
    for page in keyset_pages(keys, key="object_pk", size=CHUNK_SIZE):
        chunk = [key for (key,) in page]
        wanted = {}
        for key in chunk:
            try:
                wanted[key] = pk_field.to_python(key)
            except ValidationError:
                pass  # not a pk of this model: an orphan
        present = {
            str(pk)
            for pk in model._base_manager.db_manager(using)
            .filter(pk__in=list(wanted.values()))
            .values_list("pk", flat=True)
        }
        gone = [key for key in chunk if key not in present]
        if gone:
            keys.filter(object_pk__in=gone).delete()


def mark_incomplete(name: str) -> None:
    """Values were added without their rows: keys may miss rows until the next backfill."""
    BoundKeyState.objects.filter(binding=name).update(complete_at=None, revision=F("revision") + 1)


def lookup(
    binding: Any, model: type[Model], field: str, normalizer: Any, value: str, exclude_pk: Any
) -> bool | None:
    """Is a row's normalised value ``value``? None when the keys cannot tell.

    One query: the binding's state row (complete, same source and normaliser)
    with an EXISTS on the (binding, digest) index.
    """
    label = source_label(model, field)
    name = normalizer_name(normalizer)
    if binding is None or source_label(binding.model, binding.field) != label:
        return None
    if normalizer_name(binding.normalizer) != name:
        return None
    using = router.db_for_read(model)
    keys = BoundKey.objects.using(using).filter(binding=OuterRef("binding"), digest=digest(value))
    if exclude_pk is not None:
        keys = keys.exclude(object_pk=str(exclude_pk))
    state = BoundKeyState.objects.using(using).filter(
        binding=binding.filter_name, source=label, normalizer=name, complete_at__isnull=False
    )
    found = list(state.annotate(taken=Exists(keys)).values_list("taken", flat=True)[:1])
    return bool(found[0]) if found else None


def incomplete(bindings: Iterable[Any]) -> list[tuple[Any, str]]:
    """(binding, why) for declared bindings whose keys the validator cannot use yet."""
    out = []
    for binding in bindings:
        try:
            model = binding.model
        except LookupError:
            continue  # reported by the binding's own checks
        label = source_label(model, binding.field)
        state = BoundKeyState.objects.filter(binding=binding.filter_name).first()
        if state is None or state.complete_at is None:
            out.append(
                (binding, "its keys were never backfilled, or values were added without rows")
            )
        elif (state.source, state.normalizer) != (label, normalizer_name(binding.normalizer)):
            out.append((binding, "its source or normaliser changed since the last backfill"))
    return out
