"""What a blocklist check reads from the database, kept per process: the prefix lengths
in use, the rows behind filter hits (confirmations), the allowed networks; and when all
of it is dropped (``forget_caches``).

- Prefix lengths: one small ``DISTINCT`` query per list, kept ``PREFIX_LENGTHS_TTL``
  seconds, so a check never pays for them.
- Confirmations: the row behind a filter hit (None: a false positive), per (list,
  network), kept ``CONFIRM_CACHE_TTL`` seconds, never past the row's expiry (a cooldown
  another process restarted is read again).
- The allowlist: the ``ALLOWLIST`` setting first (no query: a health checker's requests
  cost nothing), then the active ``AllowedNetwork`` rows (the admin's) as an index like the
  filter's: per IP version, the prefix lengths in use and the networks as stored text, so an
  address is masked at each length and looked up (``ip.candidate_networks``), whatever the
  number of rows; one query, kept ``PREFIX_LENGTHS_TTL`` seconds. A row that does not
  parse (written behind the API's back) is skipped with a warning.

Everything is dropped after every write made in this process, on settings changes, and
when this process's copy of the list's filter changes (``service``: another process
wrote); the TTLs bound what is seen of changes made behind the API's back.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from datetime import datetime
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.db.models import BooleanField, Case, Value, When
from django.db.models.functions import StrIndex, Substr
from django.utils import timezone

from django_bloom.conf import forget_on_change, get_config
from django_bloom.expiring import MISSING, Expiring
from django_bloom.ipblock import ip as iplib
from django_bloom.models import AllowedNetwork, BlockedEntry

logger = logging.getLogger("django_bloom.blocklist")

CONFIRM_CACHE_MAX = 10_000  # entries kept per process before the cache is dropped
WARN_INTERVAL = 60.0

# version -> (prefix lengths in use, longest first; {network text: expiry or None})
AllowedIndex = dict[int, tuple[tuple[int, ...], dict[str, datetime | None]]]

_prefixes = Expiring()  # list name -> {4: (32, 24, ...), 6: (...)}
_confirmed = Expiring(CONFIRM_CACHE_MAX)  # (list name, network) -> its row, None if none
_allowed = Expiring()  # "index" -> AllowedIndex
_warned = Expiring()  # warning key -> when it was last logged (``claim``)


@forget_on_change
def forget_caches() -> None:
    """Drop the prefix lengths, confirmations, allowed networks and warning throttle of
    this process: after every write made here, and on settings changes."""
    forget_reads()
    _warned.clear()


def forget_reads() -> None:
    """Drop what was read from the database (another process wrote)."""
    _prefixes.clear()
    _confirmed.clear()
    _allowed.clear()


def warn_throttled(log: logging.Logger, key: str, message: str, *args: Any) -> None:
    """Log a warning at most once per ``WARN_INTERVAL`` per key: an outage must not
    write one line per request."""
    if _warned.claim(key, WARN_INTERVAL):
        log.warning(message, *args)


# -- prefix lengths -------------------------------------------------------------
def _load_prefix_lengths(name: str) -> dict[int, tuple[int, ...]]:
    rows = (
        BlockedEntry.objects.active()
        .filter(list_name=name)
        .order_by()
        .annotate(
            is_v6=Case(
                When(network__contains=":", then=Value(True)),
                default=Value(False),
                output_field=BooleanField(),
            ),
            plen=Substr("network", StrIndex("network", Value("/")) + 1),
        )
        .values_list("is_v6", "plen")
        .distinct()
    )
    found: dict[int, set[int]] = {4: set(), 6: set()}
    for is_v6, plen in rows:
        version, bits = (6, 128) if is_v6 else (4, 32)
        try:
            length = int(plen)
        except (TypeError, ValueError):
            length = bits  # a row without "/": a single address
        if 0 <= length <= bits:
            found[version].add(length)
    return {v: tuple(sorted(lengths, reverse=True)) for v, lengths in found.items() if lengths}


def prefix_lengths(name: str) -> dict[int, tuple[int, ...]]:
    """{4: (32, 24, ...), 6: (...)}: prefix lengths of the list's active entries."""
    now = time.monotonic()
    cached = _prefixes.get(name, now, None)
    if cached is not None:
        return cached
    lengths = _load_prefix_lengths(name)
    _prefixes.put(name, lengths, now + float(get_config()["PREFIX_LENGTHS_TTL"]))
    return lengths


def cached_prefix_lengths(name: str) -> dict[int, tuple[int, ...]] | None:
    """The list's prefix lengths if this process holds them, else None (no query)."""
    return _prefixes.get(name, time.monotonic(), None)


# -- confirmations --------------------------------------------------------------
def confirm(name: str, hits: Iterable[str]) -> dict[str, BlockedEntry | None]:
    """The row behind each filter hit (None: a false positive), cached per process."""
    now = time.monotonic()
    found, missing = cached_confirmations(name, hits, now)
    if missing:
        rows = {
            e.network: e for e in BlockedEntry.objects.filter(list_name=name, network__in=missing)
        }
        ttl, wall = float(get_config()["CONFIRM_CACHE_TTL"]), timezone.now()
        for network in missing:
            row = found[network] = rows.get(network)
            left = (row.expires_at - wall).total_seconds() if row and row.expires_at else ttl
            # Never past a future expiry: a cooldown another process restarted is re-read.
            _confirmed.put((name, network), row, now + (min(ttl, left) if left > 0 else ttl))
    return found


def cached_confirmations(
    name: str, hits: Iterable[str], now: float
) -> tuple[dict[str, BlockedEntry | None], list[str]]:
    """(the confirmations this process holds, the hits it has none for)."""
    found: dict[str, BlockedEntry | None] = {}
    missing: list[str] = []
    for network in hits:
        cached = _confirmed.get((name, network), now)
        if cached is not MISSING:
            found[network] = cached
        else:
            missing.append(network)
    return found, missing


# -- the allowlist --------------------------------------------------------------
def cached_allowed() -> AllowedIndex | None:
    """The allowed networks' index this process holds, None when it must be read
    (``load_allowed``)."""
    return _allowed.get("index", time.monotonic(), None)


def in_setting(address: iplib.IPAddress) -> bool:
    """Is ``address`` in the ``ALLOWLIST`` setting (parsed once per value)?"""
    try:
        return iplib.is_allowlisted(address)
    except ValueError as exc:
        raise ImproperlyConfigured(f"DJANGO_BLOOM['ALLOWLIST']: {exc}") from None


def load_allowed() -> AllowedIndex:
    """Read the active rows; keep their index ``PREFIX_LENGTHS_TTL`` seconds."""
    now = time.monotonic()
    found: dict[int, dict[str, datetime | None]] = {4: {}, 6: {}}
    for text, expires in AllowedNetwork.objects.active().values_list("network", "expires_at"):
        try:
            network = iplib.parse_network(text)
        except ValueError:
            logger.warning("allowlist: skipping unparsable network %r", text)
            continue
        kept = found[network.version].setdefault(str(network), expires)
        if kept is not None and (expires is None or expires > kept):
            found[network.version][str(network)] = expires
    index = {
        version: (tuple(sorted({int(t.rsplit("/", 1)[1]) for t in nets}, reverse=True)), nets)
        for version, nets in found.items()
        if nets
    }
    _allowed.put("index", index, now + float(get_config()["PREFIX_LENGTHS_TTL"]))
    return index


def allowed(address: iplib.IPAddress, index: AllowedIndex, now: datetime | None = None) -> bool:
    """Is ``address`` in an allowed network of ``index`` that has not expired?"""
    lengths, networks = index.get(address.version, ((), {}))
    for candidate in iplib.candidate_networks(address, lengths):
        if candidate in networks:
            expires = networks[candidate]
            if expires is None or expires > (now or timezone.now()):
                return True
    return False
