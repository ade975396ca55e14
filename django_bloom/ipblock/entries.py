"""Writing the blocklist: block, unblock, import a netset. Rows are the truth; the
filter is written first (see ``service``'s docstring for why that order)."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.db import transaction
from django.utils import timezone

from django_bloom.db_access import write_transaction
from django_bloom.engine.hashers import chunked
from django_bloom.exceptions import BloomError, FilterKeyMissing, FilterNotFound
from django_bloom.ipblock import ip as iplib
from django_bloom.ipblock.netset import Source, dedupe, parse_netset
from django_bloom.ipblock.service import (
    ensure_blocklist_filter,
    forget_caches,
    list_name_or_default,
    rebuild_blocklist,
)
from django_bloom.models import BlockedEntry, BloomFilter
from django_bloom.services import Filter, get_filter

logger = logging.getLogger("django_bloom.blocklist")

# Above this many items in one write, rebuilding the filter in process (one
# bitmap upload) beats sending every item's bits as commands.
BULK_REBUILD_ITEMS = 50_000
QUERY_CHUNK = 500  # networks per ``IN (...)`` query (old SQLite allows 999 variables)
REASON_MAX = BlockedEntry._meta.get_field("reason").max_length


@dataclass
class ImportResult:
    added: int
    duplicates: int
    errors: list[tuple[int, str, str]] = field(default_factory=list)
    refreshed: int = 0  # rows already listed whose expiry this import extended


def _write_filter(handle: Filter, name: str, items: list[str], total: int | None = None) -> None:
    """Put ``items`` in the filter; rebuild instead for big batches, growth or a lost key."""
    if len(items) > BULK_REBUILD_ITEMS or (total is not None and total > handle.meta.capacity):
        rebuild_blocklist(name)
        return
    try:
        handle.without_normalizer.add_many(items)
    except FilterKeyMissing:
        logger.warning("blocklist %r: filter key lost in Redis; rebuilding it from the DB", name)
        rebuild_blocklist(name)


def _after_write(name: str) -> None:
    forget_caches()
    transaction.on_commit(forget_caches)


# -- validation -----------------------------------------------------------------
def _clean_reason(reason: Any) -> str:
    reason = "" if reason is None else str(reason)
    if len(reason) > REASON_MAX:
        raise ValueError(f"reason is longer than {REASON_MAX} characters")
    return reason


def _clean_expiry(expires_at: Any) -> datetime | None:
    if expires_at is None:
        return None
    if not isinstance(expires_at, datetime):
        raise TypeError(f"expires_at must be a datetime or None, got {type(expires_at).__name__}")
    if timezone.is_naive(expires_at):
        expires_at = timezone.make_aware(expires_at)
    if expires_at <= timezone.now():
        raise ValueError(f"expires_at {expires_at.isoformat()} is not in the future")
    return expires_at


# -- writes ---------------------------------------------------------------------
def block(
    network: Any,
    reason: str = "",
    expires_at: datetime | None = None,
    list_name: str | None = None,
) -> BlockedEntry:
    """Block an address or network (updates reason/expiry if already listed).

    Raises ``ValueError`` for a bad network, reason or expiry, and
    ``FilterUnavailable`` when Redis cannot take the write; either way nothing
    is written.
    """
    text = iplib.normalize_network(network)
    reason = _clean_reason(reason)
    expires_at = _clean_expiry(expires_at)
    name = list_name_or_default(list_name)
    handle = ensure_blocklist_filter(name)
    with write_transaction():  # SQLite: the write lock before reading
        entry = _update_listed(handle, name, text, reason, expires_at)
        if entry is None:
            entry, _ = BlockedEntry.objects.update_or_create(
                list_name=name, network=text, defaults={"reason": reason, "expires_at": expires_at}
            )
            _write_filter(handle, name, [text])
    _after_write(name)
    return entry


def _listed_row(name: str, text: str) -> BlockedEntry | None:
    """The list's row for ``text`` (locked until commit where the database can)."""
    return BlockedEntry.objects.select_for_update().filter(list_name=name, network=text).first()


def _update_listed(
    handle: Filter, name: str, text: str, reason: str, expires_at: datetime | None
) -> BlockedEntry | None:
    """Counting filters: a row that is active now is in the filter once already (its
    block, import or the last rebuild put it there), so only the row changes: adding
    again would make one unblock leave it in. None when the item must go in the filter
    (no row, an expired one, a row an unblock deleted meanwhile, another layout)."""
    if not handle.can_remove:
        return None
    row = _listed_row(name, text)
    if row is None or not row.is_active():
        return None
    if not BlockedEntry.objects.filter(pk=row.pk).update(reason=reason, expires_at=expires_at):
        return None  # deleted in the meantime (an unblock): block it afresh
    row.reason, row.expires_at = reason, expires_at
    return row


def unblock(network: Any, list_name: str | None = None) -> int:
    """Delete the entry; returns how many rows went (0 or 1).

    A plain filter keeps the item (Bloom filters cannot delete) but a hit is
    confirmed against the rows, so the network is no longer blocked; a rebuild
    drops the item. A counting filter (layout ``counting``) loses the item at once,
    but only when it surely holds it: the row was active (expired rows may have
    been dropped by a rebuild: then removing could take another entry's counts
    away). The item is removed once the row's delete has committed
    (``transaction.on_commit``): an unblock that rolls back (an outer transaction,
    ``ATOMIC_REQUESTS``) leaves the filter alone, so a row that stays never loses
    its item. A ``block`` of the same network after the commit finds no row and
    adds the item again before this removal can run, so counts stay right. If
    Redis cannot take the removal the row is gone anyway and the item stays in the
    filter until a rebuild (harmless: hits are confirmed against the rows).
    """
    text = iplib.normalize_network(network)
    name = list_name_or_default(list_name)
    with write_transaction():  # SQLite: the write lock before reading
        row = _listed_row(name, text)
        if row is None:
            deleted = 0
        else:
            if row.is_active():
                # After the delete commits: a rolled-back unblock must leave the item in.
                transaction.on_commit(lambda: _remove_from_filter(name, text))
            deleted, _ = BlockedEntry.objects.filter(pk=row.pk).delete()
    _after_write(name)
    return deleted


def _remove_from_filter(name: str, text: str) -> None:
    try:
        handle = get_filter(name)
        if handle.can_remove and handle.meta.kind == BloomFilter.Kind.BLOCKLIST:
            handle.remove(text)
    except (FilterNotFound, BloomError) as exc:
        logger.warning(
            "blocklist %r: could not remove %s from its counting filter (%s); it stays "
            "there until a rebuild (hits are confirmed against the rows: harmless)",
            name,
            text,
            exc,
        )


def import_netset(
    source: Source,
    reason: str = "",
    expires_at: datetime | None = None,
    list_name: str | None = None,
) -> ImportResult:
    """Import a FireHOL/ipset netset (a path, an open file or lines).

    Bad lines are reported as ``(lineno, line, message)`` and skipped. Networks
    already listed count as duplicates (as do repeats within the file); their
    expiry is extended when this import's is later (or never), so a daily
    re-import with ``--expires 2d`` keeps a list alive. All new rows go in with
    ``bulk_create`` and the filter gets them in one ``add_many``.
    """
    reason = _clean_reason(reason)
    expires_at = _clean_expiry(expires_at)
    name = list_name_or_default(list_name)
    entries, bad = parse_netset(source)
    errors = [(b.lineno, b.line, b.message) for b in bad]
    texts, repeats = dedupe(entries)
    if not texts:
        return ImportResult(added=0, duplicates=repeats, errors=errors)
    handle = ensure_blocklist_filter(name)
    with write_transaction():  # SQLite: the write lock before reading
        existing: dict[str, tuple[int, datetime | None]] = {}
        for chunk in chunked(texts, QUERY_CHUNK):
            rows = BlockedEntry.objects.filter(list_name=name, network__in=chunk).values_list(
                "pk", "network", "expires_at"
            )
            existing.update((net, (pk, exp)) for pk, net, exp in rows)
        new = [t for t in texts if t not in existing]
        BlockedEntry.objects.bulk_create(
            [
                BlockedEntry(list_name=name, network=t, reason=reason, expires_at=expires_at)
                for t in new
            ],
            batch_size=1000,
            ignore_conflicts=True,
        )
        extend = [
            pk
            for pk, old in existing.values()
            if old is not None and (expires_at is None or old < expires_at)
        ]
        for chunk in chunked(extend, QUERY_CHUNK):
            BlockedEntry.objects.filter(pk__in=chunk).update(expires_at=expires_at)
        total = BlockedEntry.objects.active().filter(list_name=name).count()
        if handle.can_remove:
            # A counting filter holds each active row once already: add only new rows and
            # revived (expired) ones, so one unblock takes a daily re-imported entry out.
            now = timezone.now()
            texts = new + [
                net for net, (_pk, old) in existing.items() if old is not None and old <= now
            ]
        _write_filter(handle, name, texts, total)
    _after_write(name)
    return ImportResult(
        added=len(new), duplicates=repeats + len(existing), errors=errors, refreshed=len(extend)
    )
