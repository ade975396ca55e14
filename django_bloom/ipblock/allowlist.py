"""The allowlist a check reads first: the ``ALLOWLIST`` setting (no query: the health
checker's requests cost nothing), then the active ``AllowedNetwork`` rows (the admin's),
as an index kept per process.

The index is what the blocklist's prefix lengths are for the filter: per IP version, the
prefix lengths in use and the networks as stored text, so an address is masked at each
length and looked up (``ip.candidate_networks``), whatever the number of rows. It is read
from the database (one query) and kept for ``PREFIX_LENGTHS_TTL`` seconds, dropped with the
blocklist's other caches (``service.forget_caches``: this process's writes, and another
process's once this one's copy of the filter changes). Writes: ``entries.allow`` and
``entries.disallow``. A row that does not parse (written behind the API's back) is
skipped with a warning.
"""

from __future__ import annotations

import logging
import time
from datetime import datetime

from django.core.exceptions import ImproperlyConfigured
from django.utils import timezone

from django_bloom.conf import get_config
from django_bloom.expiring import Expiring
from django_bloom.ipblock import ip as iplib
from django_bloom.models import AllowedNetwork

logger = logging.getLogger("django_bloom.blocklist")

# version -> (prefix lengths in use, longest first; {network text: expiry or None})
Index = dict[int, tuple[tuple[int, ...], dict[str, datetime | None]]]
_index = Expiring()


def forget() -> None:
    _index.clear()


def cached_index() -> Index | None:
    """The index this process holds, None when it must be read (``load_index``)."""
    return _index.get("index", time.monotonic(), None)


def in_setting(address: iplib.IPAddress) -> bool:
    """Is ``address`` in the ``ALLOWLIST`` setting (parsed once per value)?"""
    try:
        return iplib.is_allowlisted(address)
    except ValueError as exc:
        raise ImproperlyConfigured(f"DJANGO_BLOOM['ALLOWLIST']: {exc}") from None


def load_index() -> Index:
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
    _index.put("index", index, now + float(get_config()["PREFIX_LENGTHS_TTL"]))
    return index


def allowed(address: iplib.IPAddress, index: Index, now: datetime | None = None) -> bool:
    """Is ``address`` in an allowed network of ``index`` that has not expired?"""
    lengths, networks = index.get(address.version, ((), {}))
    for candidate in iplib.candidate_networks(address, lengths):
        if candidate in networks:
            expires = networks[candidate]
            if expires is None or expires > (now or timezone.now()):
                return True
    return False
