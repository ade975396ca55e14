"""The IP blocklist: ``BlockedEntry`` rows are the truth, a Bloom filter the fast path.

How networks fit in a Bloom filter (which holds no ranges): every entry is
inserted as its canonical ``<network_address>/<prefixlen>`` text. To check an
address, it is masked at *each prefix length in use* for its IP version and all
those candidates are probed with one ``contains_many`` call: one Redis round
trip, whatever the number of lengths. The lengths in use come from the database
(one small ``DISTINCT`` query) and are kept in process for
``PREFIX_LENGTHS_TTL`` seconds, so requests never pay for them in Redis.

A filter hit only means "maybe": it is confirmed against the rows (cached per
(list, network) for ``CONFIRM_CACHE_TTL`` seconds, never past the row's expiry) before
anyone is refused, so a false positive never blocks a visitor and expired entries never
block. The allowlist is read first. What a check reads from the database is kept per
process (``reads.py``).

The list's filter is mirrored (``BLOCKLIST_MIRROR``: a local copy, ``engine/mirror.py``),
so a check costs no round trip. The caches above (and the allowlist's) are valid for one
state of that copy: when it changes (another process wrote, and every write touches the
filter again once committed: ``entries.py``), they are dropped and the check runs again.
A write elsewhere so applies here as soon as the copy follows it.

Writes (``entries.py``) update the filter *before* the database transaction commits: if Redis
fails, the transaction rolls back and nothing is written; if the transaction
rolls back after the filter write, the extra filter item is harmless (hits are
confirmed). The opposite order could leave a committed row the filter does not
know, which would silently let that network through.
"""

from __future__ import annotations

import ipaddress
import logging
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from asgiref.sync import sync_to_async
from django.utils import timezone

from django_bloom.conf import get_config
from django_bloom.db_access import keyset_pages
from django_bloom.engine.mirror import mirror_for
from django_bloom.exceptions import FilterExists, FilterNotFound, NotABlocklist
from django_bloom.ipblock import ip as iplib
from django_bloom.ipblock import reads
from django_bloom.ipblock.ip import candidate_networks
from django_bloom.models import BlockedEntry, BloomFilter
from django_bloom.services import Filter, aget_filter, create_filter, get_filter, validate_name

logger = logging.getLogger("django_bloom.blocklist")


# Decision.reason values.
BLOCKED = "listed"
ALLOWLISTED = "allowlisted"
UNKNOWN = "unknown address"
NOT_LISTED = "not listed"
FALSE_POSITIVE = "filter false positive"
EXPIRED = "expired"


@dataclass(frozen=True)
class Decision:
    """What ``check_ip`` found. ``entry`` is the confirmed (most specific) row."""

    blocked: bool
    entry: BlockedEntry | None
    reason: str
    ip: str | None = None

    @property
    def network(self) -> str | None:
        return self.entry.network if self.entry is not None else None


_copies: dict[str, int] = {}  # list name -> its mirror's ``loads`` the caches are valid for
_valid_names: set[str] = set()


def list_name_or_default(list_name: str | None) -> str:
    name = list_name or get_config()["BLOCKLIST_FILTER"]
    if name not in _valid_names:  # checked once per process: the hot path asks every time
        _valid_names.add(validate_name(name))
    return name


def prefix_lengths(list_name: str | None = None) -> dict[int, tuple[int, ...]]:
    """{4: (32, 24, ...), 6: (...)}: prefix lengths of the list's active entries."""
    return reads.prefix_lengths(list_name_or_default(list_name))


# -- the filter -----------------------------------------------------------------
def refuse_foreign_list(name: str) -> str:
    """``name`` if it may name a blocklist: a blocklist filter, or no filter (and no
    BINDINGS declaration) yet. Otherwise ``NotABlocklist``: blocklist entries never write
    into nor rebuild another filter. One small database query, no Redis."""
    row = BloomFilter.objects.filter(name=name).values_list("kind", "family").first()
    if row is not None and row != (BloomFilter.Kind.BLOCKLIST, False):
        what = "a filter family" if row[1] else f"a filter of kind {row[0]!r}"
    elif row is None and name in (get_config().get("BINDINGS") or {}):
        what = "a name declared in DJANGO_BLOOM['BINDINGS']"
    else:
        return name
    raise NotABlocklist(
        f"{name!r} is not a blocklist filter ({what}): a list name names a filter of kind "
        "'blocklist', or none yet. Nothing was written."
    )


def ensure_blocklist_filter(
    list_name: str | None = None, *, capacity: int | None = None, error_rate: float | None = None
) -> Filter:
    """The list's filter, created (kind ``blocklist``) and filled from the rows if missing.

    New filters get ``BLOCKLIST_CAPACITY`` / ``BLOCKLIST_ERROR_RATE``, or twice the
    rows already listed, whichever is larger.
    """
    name = refuse_foreign_list(list_name_or_default(list_name))
    try:
        return get_filter(name)
    except FilterNotFound:
        pass
    config = get_config()
    rows = BlockedEntry.objects.filter(list_name=name).count()
    size = max(int(capacity or config["BLOCKLIST_CAPACITY"]), 2 * rows, 1)
    try:
        handle = create_filter(
            name,
            capacity=size,
            error_rate=float(error_rate or config["BLOCKLIST_ERROR_RATE"]),
            kind=BloomFilter.Kind.BLOCKLIST,
            description=f"IP blocklist: the BlockedEntry rows with list_name={name!r}.",
        )
    except FilterExists:  # created meanwhile: a blocklist, or refused
        return get_filter(refuse_foreign_list(name), refresh=True)
    if rows:
        handle.without_normalizer.rebuild(iter_filter_items(name))
    return handle


def iter_filter_items(list_name: str | None = None, now: datetime | None = None) -> Iterator[str]:
    """The filter items of the list's active entries (what a rebuild inserts), read in
    keyset pages (``db_access``: no cursor keeps the site's writers waiting)."""
    name = list_name_or_default(list_name)
    for page in keyset_pages(BlockedEntry.objects.active(now).filter(list_name=name), "network"):
        for _pk, text in page:
            try:
                yield iplib.normalize_network(text)
            except ValueError:
                logger.warning("blocklist %r: skipping unparsable network %r", name, text)


def rebuild_blocklist(list_name: str | None = None, *, progress=None) -> int:
    """Refill the list's filter from its active rows, growing it when over capacity."""
    name = list_name_or_default(list_name)
    handle = ensure_blocklist_filter(name)
    rows = BlockedEntry.objects.active().filter(list_name=name).count()
    capacity = handle.meta.capacity if rows <= handle.meta.capacity else 2 * rows
    raw = handle.without_normalizer  # the rows' prefixes, as stored
    return raw.rebuild(iter_filter_items(name), capacity=capacity, progress=progress)


# -- reads ----------------------------------------------------------------------
def check_ip(
    address: Any, list_name: str | None = None, *, now: datetime | None = None
) -> Decision:
    """Is this address blocked? Allowlist first, then the filter (its local copy, or one
    round trip), then the rows.

    ``address`` is text or an ``ipaddress`` object; garbage is "unknown" and not
    blocked. Raises ``FilterUnavailable`` (Redis down, key lost) or
    ``FilterNotFound`` when the filter cannot answer; the middleware applies
    ``FAIL_OPEN``.
    """
    early, parsed, name = _before_lists(address, list_name)
    if early is not None:
        return early
    for again in (False, True):  # again once the caches were dropped for a changed copy
        index = reads.cached_allowed()
        index = reads.load_allowed() if index is None else index
        plan = _plan(parsed, name, index, reads.prefix_lengths(name), now)
        if isinstance(plan, Decision):
            return plan
        handle = get_filter(name)
        local = mirror_for(handle)
        answers = _probed(handle, local, plan)
        if answers is None:  # no copy, or one due for a re-check (a round trip here)
            answers = handle.without_normalizer.contains_many(plan)
        if again or not _copy_changed(name, local):
            break
    hits = _hits(plan, answers)
    return _verdict(parsed, hits, reads.confirm(name, hits), now)


async def acheck_ip(
    address: Any, list_name: str | None = None, *, now: datetime | None = None
) -> Decision:
    """``check_ip`` for async code (the ASGI middleware): the filter read is awaited on the
    event loop (``Filter.acontains_many``: the copy, or the round trip), no thread. Database
    reads (prefix lengths, allowlist, confirmations, the filter's row), cached per process,
    run in ``sync_to_async`` only when their cache has expired."""
    early, parsed, name = _before_lists(address, list_name)
    if early is not None:
        return early
    for again in (False, True):
        index = reads.cached_allowed()
        index = await sync_to_async(reads.load_allowed)() if index is None else index
        lengths = reads.cached_prefix_lengths(name)
        if lengths is None:
            lengths = await sync_to_async(prefix_lengths)(name)
        plan = _plan(parsed, name, index, lengths, now)
        if isinstance(plan, Decision):
            return plan
        handle = await aget_filter(name)
        local = mirror_for(handle)
        answers = _probed(handle, local, plan)
        if answers is None:  # no copy, or one due for a re-check (in a thread)
            answers = await handle.without_normalizer.acontains_many(plan)
        if again or not _copy_changed(name, local):
            break
    hits = _hits(plan, answers)
    found, missing = reads.cached_confirmations(name, hits, time.monotonic())
    if missing:
        found = await sync_to_async(reads.confirm)(name, hits)
    return _verdict(parsed, hits, found, now)


def _before_lists(address: Any, list_name: str | None) -> tuple[Decision | None, Any, str]:
    """An unknown address, or one in the ``ALLOWLIST`` setting: its decision (no query, no
    filter). Else None, the parsed address and the list's name."""
    parsed = iplib.parse_ip(address)
    if parsed is None:
        return Decision(False, None, UNKNOWN), None, ""
    if reads.in_setting(parsed):
        return Decision(False, None, ALLOWLISTED, str(parsed)), parsed, ""
    return None, parsed, list_name_or_default(list_name)


def _plan(
    parsed: iplib.IPAddress,
    name: str,
    index: reads.AllowedIndex,
    lengths: dict[int, tuple[int, ...]],
    now: datetime | None,
) -> Decision | list[str]:
    """What needs no filter (an allowed row; no entry of its version), or what to probe: the
    address at each length in use. A mirrored list with entries of the other version only
    probes the address itself, so that this process still sees its copy change."""
    text = str(parsed)
    if reads.allowed(parsed, index, now):
        return Decision(False, None, ALLOWLISTED, text)
    in_use = lengths.get(parsed.version)
    if in_use:
        return candidate_networks(parsed, in_use)
    if lengths and name in get_config()["MIRROR_FILTERS"]:
        return [f"{text}/{parsed.max_prefixlen}"]
    return Decision(False, None, NOT_LISTED, text)


def _probed(handle: Filter, local: Any, candidates: list[str]) -> list[bool] | None:
    """The candidates probed on the local copy one by one: a miss (nearly every candidate)
    stops at its first clear bit, where ``contains_many`` would compute all k positions of
    each (0.6-0.7x its time for FireHOL's 20). None without a copy that may answer now
    (none, or due for a re-check): ``contains_many`` then re-checks it, re-reads a
    resized row, or raises."""
    copy = local.current() if local is not None else None
    if copy is None:
        return None
    return [local.probe(h1, h2, copy) for h1, h2 in handle.hashes(candidates)]


def _copy_changed(name: str, local: Any) -> bool:
    """Did the list's local copy change since its caches were filled? Then they are
    dropped (another process wrote: its rows are what they now hold)."""
    if local is None or _copies.get(name) == local.loads:
        return False
    reads.forget_reads()
    _copies[name] = local.loads
    return True


def _hits(candidates: Sequence[str], answers: Iterable[bool]) -> list[str]:
    """The candidates the filter says it may hold."""
    return [c for c, hit in zip(candidates, answers, strict=True) if hit]


def _verdict(
    parsed: iplib.IPAddress,
    hits: Sequence[str],
    found: dict[str, BlockedEntry | None],
    now: datetime | None,
) -> Decision:
    """The decision from the filter's hits (none: not listed) and the rows behind them."""
    text = str(parsed)
    if not hits:
        return Decision(False, None, NOT_LISTED, text)
    rows = [e for e in found.values() if e is not None]
    now = now or timezone.now()
    active = [e for e in rows if e.is_active(now)]
    if active:
        best = max(active, key=lambda e: ipaddress.ip_network(e.network).prefixlen)
        return Decision(True, best, BLOCKED, text)
    return Decision(False, None, EXPIRED if rows else FALSE_POSITIVE, text)


__all__ = [
    "Decision",
    "candidate_networks",
    "iter_filter_items",
    "check_ip",
    "acheck_ip",
    "ensure_blocklist_filter",
    "refuse_foreign_list",
    "rebuild_blocklist",
    "prefix_lengths",
]
