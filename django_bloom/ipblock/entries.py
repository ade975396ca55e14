"""Writing the blocklist: block, unblock, import a netset; allow and disallow. Rows are the
truth; the filter is written first (see ``service``'s docstring for why that order), and
touched again once the transaction has committed (``after_write``): other processes drop
their caches when their copy of the filter changes, and only then do the rows they read
again hold this write. The signals (``signals.py``) go out after the commit too."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from functools import partial
from typing import Any

from django.db import transaction
from django.utils import timezone

from django_bloom.conf import get_config
from django_bloom.db_access import write_transaction
from django_bloom.engine.hashers import chunked
from django_bloom.engine.mirror import mirror_for
from django_bloom.exceptions import BloomError, FilterKeyMissing, FilterNotFound
from django_bloom.ipblock import ip as iplib
from django_bloom.ipblock.netset import Source, dedupe, parse_netset
from django_bloom.ipblock.reads import forget_caches
from django_bloom.ipblock.service import (
    ensure_blocklist_filter,
    list_name_or_default,
    rebuild_blocklist,
)
from django_bloom.ipblock.signals import entry_blocked, entry_unblocked
from django_bloom.models import AllowedNetwork, BlockedEntry, BloomFilter
from django_bloom.services import Filter, get_filter

logger = logging.getLogger("django_bloom.blocklist")

# Above this many items in one write, rebuilding the filter in process (one
# bitmap upload) beats sending every item's bits as commands.
BULK_REBUILD_ITEMS = 50_000
QUERY_CHUNK = 500  # networks per ``IN (...)`` query (old SQLite allows 999 variables)
REASON_MAX = BlockedEntry._meta.get_field("reason").max_length
TOUCH_ITEM = "touched"  # what a commit adds again (no network: never a candidate)


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


def after_write(name: str | None = None) -> None:
    """After a write to the list ``name`` (default: the middleware's): this process's caches
    go now and at the commit; then the filter is touched, so other processes' copies
    change and their caches go too (``service``)."""
    name = list_name_or_default(name)
    forget_caches()
    transaction.on_commit(lambda: _committed(name))


def _committed(name: str) -> None:
    forget_caches()
    if name not in get_config()["MIRROR_FILTERS"]:
        return  # no copies to tell: other processes' caches expire (PREFIX_LENGTHS_TTL...)
    try:
        handle = get_filter(name)
    except FilterNotFound:
        return  # no filter: no copy anywhere
    if mirror_for(handle) is None:
        return  # a kind no process mirrors (counting: its counts must stay exact)
    try:
        handle.without_normalizer.add(TOUCH_ITEM)
    except BloomError as exc:
        logger.warning(
            "blocklist %r: could not touch the filter after a write (%s): other processes "
            "see it within PREFIX_LENGTHS_TTL / CONFIRM_CACHE_TTL",
            name,
            exc,
        )


# -- validation -----------------------------------------------------------------
def _clean_reason(reason: Any) -> str:
    reason = "" if reason is None else str(reason)
    if len(reason) > REASON_MAX:
        raise ValueError(f"reason is longer than {REASON_MAX} characters")
    return reason


def _clean_cooldown(cooldown: Any) -> timedelta | None:
    if cooldown is None:
        return None
    if not isinstance(cooldown, timedelta):
        raise TypeError(f"cooldown must be a timedelta or None, got {type(cooldown).__name__}")
    if cooldown <= timedelta(0):
        raise ValueError(f"cooldown must be positive, got {cooldown}")
    return cooldown


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
    cooldown: timedelta | None = None,
) -> BlockedEntry:
    """Block an address or network (updates reason/expiry/cooldown if already listed).

    ``cooldown``: each refused request restarts the expiry, so the entry expires after
    this long without one (``expires_at``, if given, is its first expiry; else now +
    ``cooldown``). Raises ``ValueError``/``TypeError`` for a bad network, reason, expiry or
    cooldown, and ``FilterUnavailable`` when Redis cannot take the write; either way
    nothing is written. Sends ``entry_blocked`` once committed.
    """
    text = iplib.normalize_network(network)
    reason = _clean_reason(reason)
    cooldown = _clean_cooldown(cooldown)
    expires_at = _clean_expiry(expires_at or (cooldown and timezone.now() + cooldown))
    name = list_name_or_default(list_name)
    handle = ensure_blocklist_filter(name)
    fields = {"reason": reason, "expires_at": expires_at, "cooldown": cooldown}
    with write_transaction():  # SQLite: the write lock before reading
        entry, created = _update_listed(handle, name, text, fields), False
        if entry is None:
            entry, created = BlockedEntry.objects.update_or_create(
                list_name=name, network=text, defaults=fields
            )
            _write_filter(handle, name, [text])
        transaction.on_commit(
            lambda: entry_blocked.send_robust(BlockedEntry, entry=entry, created=created)
        )
    after_write(name)
    return entry


def _listed_row(name: str, text: str) -> BlockedEntry | None:
    """The list's row for ``text`` (locked until commit where the database can)."""
    return BlockedEntry.objects.select_for_update().filter(list_name=name, network=text).first()


def _update_listed(
    handle: Filter, name: str, text: str, fields: dict[str, Any]
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
    if not BlockedEntry.objects.filter(pk=row.pk).update(**fields):
        return None  # deleted in the meantime (an unblock): block it afresh
    for attribute, value in fields.items():
        setattr(row, attribute, value)
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
    filter until a rebuild (harmless: hits are confirmed against the rows). Sends
    ``entry_unblocked`` once committed.
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
            transaction.on_commit(lambda: entry_unblocked.send_robust(BlockedEntry, entry=row))
    after_write(name)
    return deleted


def expire(queryset: Any) -> int:
    """Expire these entries now: they stop blocking, their rows stay (the admin's "Expire
    now"). ``entry_unblocked`` for each that was active, once committed."""
    now = timezone.now()
    with write_transaction():
        stopping = list(queryset.active(now))
        count = queryset.update(expires_at=now)
        for row in stopping:
            row.expires_at = now
            transaction.on_commit(partial(entry_unblocked.send_robust, BlockedEntry, entry=row))
    for name in {row.list_name for row in stopping} or {None}:
        after_write(name)
    return count


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


def _announce_new(name: str, new: list[str]) -> None:
    """``entry_blocked`` for each row an import created (read back: ``bulk_create`` with
    ``ignore_conflicts`` leaves them without a primary key)."""
    for chunk in chunked(new, QUERY_CHUNK):
        for entry in BlockedEntry.objects.filter(list_name=name, network__in=chunk):
            entry_blocked.send_robust(BlockedEntry, entry=entry, created=True)


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
        if entry_blocked.has_listeners(BlockedEntry):
            transaction.on_commit(lambda: _announce_new(name, new))
    after_write(name)
    return ImportResult(
        added=len(new), duplicates=repeats + len(existing), errors=errors, refreshed=len(extend)
    )


# -- the allowlist ------------------------------------------------------------------
def allow(network: Any, reason: str = "", expires_at: datetime | None = None) -> AllowedNetwork:
    """Never refuse an address or network (updates reason/expiry if already allowed); the
    blocklist reads it first, beside the ``ALLOWLIST`` setting. Raises ``ValueError`` for a
    bad network, reason or expiry, and writes nothing then."""
    text = iplib.normalize_network(network)
    fields = {"reason": _clean_reason(reason), "expires_at": _clean_expiry(expires_at)}
    with write_transaction():
        entry, _ = AllowedNetwork.objects.update_or_create(network=text, defaults=fields)
    after_write()
    return entry


def disallow(network: Any) -> int:
    """Remove an allowed network; returns how many rows went (0 or 1)."""
    text = iplib.normalize_network(network)
    with write_transaction():
        deleted, _ = AllowedNetwork.objects.filter(network=text).delete()
    after_write()
    return deleted
