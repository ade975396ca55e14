"""``bloom`` verbs of the IP blocklist: check an address, rebuild, import a netset."""

from __future__ import annotations

import time

from django_bloom.management.cli import (
    EXIT_ABSENT,
    Progress,
    arg,
    expiry,
    fail,
    verb,
)


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
        "Import a FireHOL/ipset netset file.",
        arg("file", help="path, or '-' for stdin"),
        arg("--reason", default=""),
        arg("--expires", type=expiry, default=None, help="date, datetime or duration (7d)"),
        arg("--list-name", default=None),
        arg("--strict", action="store_true", help="any bad line: import nothing, exit 2"),
    )
    def cmd_import_blocklist(self, file, reason, expires, list_name, strict, **_):
        try:
            from django_bloom.ipblock.entries import import_netset
        except ImportError as exc:  # pragma: no cover - blocklist.py ships with the app
            raise fail(f"import-blocklist is unavailable: {exc}") from None
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
        try:
            result = import_netset(lines, reason=reason, expires_at=expires, list_name=list_name)
        except (ValueError, TypeError) as exc:
            raise fail(f"cannot import {file}: {exc}") from None
        for lineno, line, message in result.errors:
            self.stderr.write(f"{file}:{lineno}: skipped {line.strip()!r}: {message}")
        refreshed = getattr(result, "refreshed", 0)
        self.say(
            f"Imported {result.added:,} new entries ({result.duplicates:,} already listed"
            + (f", {refreshed:,} with a later expiry" if refreshed else "")
            + f", {len(result.errors):,} bad lines skipped)."
        )
        if result.errors and not (result.added or result.duplicates):
            raise fail(f"no valid entry in {file}: every line was rejected")
