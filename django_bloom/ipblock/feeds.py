"""Netset feeds: ``bloom import-blocklist --url URL`` (FireHOL, Spamhaus DROP...) on a schedule.

One GET over http or https (the standard library's ``urllib``: the system's certificate
store, ``SSL_CERT_FILE`` for a private CA, the usual proxy variables). What the server
said last (``ETag``, ``Last-Modified``) is kept per URL and list (``BlocklistFeed``) and
sent back (``If-None-Match``, ``If-Modified-Since``): an unchanged feed answers 304 and
costs nothing more (no body, no parse, no filter write), except that with an expiry its
entries' is extended in one UPDATE. Once the expiry the last import gave has passed, the
feed is downloaded whole again (a cron that stopped for a while revives what expired).

A download that fails (an HTTP error, a timeout, a refused certificate) or comes back
cut short (shorter than its ``Content-Length``, a broken chunked body, or a last line
with no line end) raises ``FeedError`` before anything is written, and the feed's state
is left as it was; so does a ``strict`` import with a bad line. The body is parsed and
imported as a file would be (``entries.import_netset``).
"""

from __future__ import annotations

import http.client
import urllib.error
import urllib.request
from dataclasses import dataclass
from datetime import datetime
from urllib.parse import urlsplit

from django.utils import timezone

from django_bloom.ipblock.entries import ImportResult, import_netset
from django_bloom.ipblock.netset import parse_netset
from django_bloom.ipblock.service import list_name_or_default
from django_bloom.models import BlockedEntry, BlocklistFeed

SCHEMES = ("http", "https")
MAX_FEED_BYTES = 64 * 1024 * 1024  # FireHOL level 1 is ~70 KB; level 4 a few MB
TIMEOUT_SECONDS = 30.0
READ_BYTES = 1024 * 1024


class FeedError(Exception):
    """The feed could not be read whole (or a strict import found a bad line): nothing was
    written."""


@dataclass
class FeedResult:
    url: str
    changed: bool  # False: the server said 304 Not Modified
    imported: ImportResult | None = None  # what the import did, when it changed
    extended: int = 0  # unchanged: entries whose expiry was extended


def check_url(url: str) -> str:
    """``url`` if it is an http(s) URL with a host; else ``ValueError``."""
    parts = urlsplit(url)
    if parts.scheme not in SCHEMES or not parts.hostname:
        raise ValueError(f"{url!r} is not an http or https URL")
    return url


def import_feed(
    url: str,
    reason: str = "",
    expires_at: datetime | None = None,
    list_name: str | None = None,
    *,
    strict: bool = False,
    timeout: float = TIMEOUT_SECONDS,
) -> FeedResult:
    """Import the netset at ``url`` into the list, unless it is unchanged since last time.

    Raises ``ValueError`` for a URL that is not http(s) (or a bad reason or expiry: see
    ``import_netset``) and ``FeedError`` when the feed cannot be read whole; either way
    nothing is written.
    """
    check_url(url)
    name = list_name_or_default(list_name)
    state = BlocklistFeed.objects.filter(url=url, list_name=name).first()
    now = timezone.now()
    headers = {"User-Agent": "django-bloom (bloom import-blocklist --url)"}
    if state is not None and (state.expires_at is None or state.expires_at > now):
        if state.etag:
            headers["If-None-Match"] = state.etag
        if state.last_modified:
            headers["If-Modified-Since"] = state.last_modified
    body, answered = _download(url, headers, timeout)
    if body is None and state is None:
        raise FeedError(f"{url}: 304 Not Modified to a request that asked for the whole feed")
    if body is None:
        extended = _extend(name, reason, expires_at, state, now)
        BlocklistFeed.objects.filter(pk=state.pk).update(checked_at=now)
        return FeedResult(url, changed=False, extended=extended)
    lines = body.decode("utf-8", errors="replace").splitlines()
    bad = parse_netset(lines)[1] if strict else []
    if bad:
        first = bad[0]
        raise FeedError(
            f"{url}: {len(bad)} bad line(s) (--strict), the first line {first.lineno}: "
            f"{first.line.strip()!r}: {first.message}; nothing was imported"
        )
    imported = import_netset(lines, reason=reason, expires_at=expires_at, list_name=name)
    BlocklistFeed.objects.update_or_create(
        url=url,
        list_name=name,
        defaults={
            "etag": answered.get("ETag", "")[:200],
            "last_modified": answered.get("Last-Modified", "")[:100],
            "expires_at": expires_at,
            "checked_at": now,
            "changed_at": now,
        },
    )
    return FeedResult(url, changed=True, imported=imported)


def _extend(
    name: str, reason: str, expires_at: datetime | None, state: BlocklistFeed, now: datetime
) -> int:
    """An unchanged feed with a later expiry: its entries (this list, this reason, active)
    get it, in one UPDATE, as a re-import would have given them."""
    if expires_at is None or state.expires_at is None or expires_at <= state.expires_at:
        return 0
    BlocklistFeed.objects.filter(pk=state.pk).update(expires_at=expires_at)
    rows = BlockedEntry.objects.active(now).filter(list_name=name, reason=reason)
    return rows.filter(expires_at__lt=expires_at).update(expires_at=expires_at)


def _download(url: str, headers: dict[str, str], timeout: float):
    """(the whole body, the response's headers); (None, headers) for 304 Not Modified."""
    request = urllib.request.Request(url, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310
            if urlsplit(response.geturl()).scheme not in SCHEMES:
                raise FeedError(f"{url}: redirected to {response.geturl()!r}, not http(s)")
            parts, size = [], 0
            while size <= MAX_FEED_BYTES and (part := response.read(READ_BYTES)):
                parts.append(part)
                size += len(part)
            body, answered = b"".join(parts), response.headers
    except urllib.error.HTTPError as exc:
        if exc.code == 304:
            return None, exc.headers
        raise FeedError(f"{url}: HTTP {exc.code} {exc.reason}") from None
    except (urllib.error.URLError, http.client.HTTPException, OSError) as exc:
        raise FeedError(f"{url}: {getattr(exc, 'reason', None) or exc}") from None
    if len(body) > MAX_FEED_BYTES:
        raise FeedError(f"{url}: larger than {MAX_FEED_BYTES:,} bytes")
    length = answered.get("Content-Length")
    if length is not None and length.isdigit() and int(length) != len(body):
        raise FeedError(f"{url}: cut short ({len(body):,} of {int(length):,} bytes)")
    if body and not body.endswith(b"\n"):
        raise FeedError(f"{url}: the last line has no line end (cut short?)")
    return body, answered
