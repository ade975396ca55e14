"""``bloom`` verbs of the IP blocklist: check an address, rebuild, import a netset (a file
or a feed's URL), report the entries' hits."""

from __future__ import annotations

import time

from django_bloom.management.cli import (
    EXIT_ABSENT,
    Progress,
    add_json_option,
    arg,
    expiry,
    fail,
    iso_moment,
    positive_int,
    verb,
)
from django_bloom.management.output import json_dumps, table


class BlocklistVerbs:
    """Mixed into ``bloom``'s Command (uses its say, filter, read_lines, streams)."""

    def check_blocklist(self, name: str, address: str) -> None:
        """Blocklists answer through check_ip: networks probed, hits confirmed in the DB."""
        from django_bloom.ipblock.ip import parse_ip
        from django_bloom.ipblock.service import check_ip

        if parse_ip(address) is None:
            raise fail(f"{address!r} is not an IP address")
        decision = check_ip(address, list_name=name)
        if decision.blocked:
            reason = decision.entry.reason or "no reason given"
            self.say(f"blocked: {decision.ip} is in {decision.network} ({reason})")
            return
        self.say(f"not blocked: {decision.ip} ({decision.reason})")
        raise SystemExit(EXIT_ABSENT)

    def rebuild_blocklist(self, name: str) -> None:
        from django_bloom.ipblock.service import rebuild_blocklist

        progress = Progress(self.stderr, f"rebuilding {name}")
        started = time.monotonic()
        count = rebuild_blocklist(name, progress=progress.update)
        progress.finish(count)
        self.say(
            f"Rebuilt blocklist {name!r} from its active BlockedEntry rows: {count:,} networks "
            f"in {time.monotonic() - started:.1f}s."
        )

    @verb(
        "Import a FireHOL/ipset netset file, or a feed's URL (skipped while unchanged).",
        arg("file", nargs="?", help="path, or '-' for stdin"),
        arg("--url", default=None, help="http(s) URL of a netset feed, instead of FILE"),
        arg("--reason", default=""),
        arg("--expires", type=expiry, default=None, help="date, datetime or duration (7d)"),
        arg("--list-name", default=None),
        arg("--strict", action="store_true", help="any bad line: import nothing, exit 2"),
    )
    def cmd_import_blocklist(self, file, url, reason, expires, list_name, strict, **_):
        from django_bloom.ipblock.entries import import_netset

        if (file is None) == (url is None):
            raise fail("give either a FILE ('-' for stdin) or --url URL")
        if url is not None:
            return self.import_feed(url, reason, expires, list_name, strict)
        # Undecodable bytes become U+FFFD: that line is reported bad, the rest imports.
        lines = list(self.read_lines(file, errors="replace"))
        if strict:
            from django_bloom.ipblock.netset import parse_netset

            _, bad = parse_netset(lines)
            if bad:
                for line in bad:
                    self.stderr.write(
                        f"{file}:{line.lineno}: {line.line.strip()!r}: {line.message}"
                    )
                raise fail(f"{len(bad)} bad line(s) in {file} (--strict): nothing was imported")
        with self.failing(f"cannot import {file}: ", ValueError, TypeError):
            result = import_netset(lines, reason=reason, expires_at=expires, list_name=list_name)
        self.imported(file, result)

    def imported(self, source: str, result) -> None:
        """What an import did: its bad lines on stderr, the counts on stdout."""
        for lineno, line, message in result.errors:
            self.stderr.write(f"{source}:{lineno}: skipped {line.strip()!r}: {message}")
        refreshed = result.refreshed
        self.say(
            f"Imported {result.added:,} new entries ({result.duplicates:,} already listed"
            + (f", {refreshed:,} with a later expiry" if refreshed else "")
            + f", {len(result.errors):,} bad lines skipped)."
        )
        if result.errors and not (result.added or result.duplicates):
            raise fail(f"no valid entry in {source}: every line was rejected")

    def import_feed(self, url, reason, expires, list_name, strict) -> None:
        from django_bloom.ipblock.feeds import FeedError, import_feed

        errors, unchanged = (FeedError, ValueError, TypeError), "; nothing was changed"
        with self.failing("cannot import the feed: ", *errors, suffix=unchanged):
            result = import_feed(url, reason, expires, list_name, strict=strict)
        if result.changed:
            return self.imported(url, result.imported)
        extended = f"; {result.extended:,} entries' expiry extended" if result.extended else ""
        self.say(f"{url} is unchanged since the last import (304 Not Modified){extended}.")

    @verb(
        "Report a blocklist's entries: the most hit, and those never hit since a date.",
        arg("action", choices=["report"]),
        arg("--list-name", default=None),
        arg("--top", type=positive_int, default=20, help="how many of the most hit (20)"),
        arg(
            "--unused-since",
            type=iso_moment,
            default=None,
            help="date: also list entries not hit since",
        ),
        add_json_option,
    )
    def cmd_blocklist(self, action, list_name, top, unused_since, as_json, **_):
        from django_bloom.ipblock.service import list_name_or_default
        from django_bloom.models import BlockedEntry

        with self.failing("", ValueError):
            name = list_name_or_default(list_name)
        rows = BlockedEntry.objects.filter(list_name=name)
        report = {"list": name, "entries": rows.count()}
        report["top"] = [_entry(e) for e in rows.filter(hits__gt=0).order_by("-hits")[:top]]
        if unused_since is not None:
            unused = rows.exclude(last_seen_at__gte=unused_since).order_by("created_at")
            report["unused"] = [_entry(e) for e in unused]
        if as_json:
            return self.stdout.write(json_dumps(report))
        self.say(f"Blocklist {name!r}: {report['entries']:,} entries. Most hit:")
        self.say(_table(report["top"]) if report["top"] else "  (no hits yet)")
        if unused_since is not None:
            self.say(f"Never hit since {unused_since:%Y-%m-%d}: {len(report['unused']):,}")
            self.say(_table(report["unused"]) if report["unused"] else "  (none)")


def _entry(entry) -> dict:
    return {
        "network": entry.network,
        "hits": entry.hits,
        "last_seen_at": entry.last_seen_at and entry.last_seen_at.isoformat(),
        "reason": entry.reason,
        "created_at": entry.created_at.isoformat(),
        "expires_at": entry.expires_at and entry.expires_at.isoformat(),
    }


def _table(entries: list[dict]) -> str:
    rows = [["NETWORK", "HITS", "LAST SEEN", "REASON", "EXPIRES"]]
    for e in entries:
        seen, expires = e["last_seen_at"] or "never", e["expires_at"] or "never"
        rows.append([e["network"], f"{e['hits']:,}", seen[:19], e["reason"], expires[:19]])
    return table(rows, right={1})
