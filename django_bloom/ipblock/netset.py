"""Reading FireHOL / ipset ``netset`` files: one address or CIDR per line.

Pure parsing, no database or Redis, so it is easy to test and reuse. Accepted:
``#`` comment lines and blank lines, inline ``#`` / ``;`` comments (Spamhaus
DROP style), single IPv4/IPv6 addresses, CIDR networks, and ``first-last``
address ranges (split into the CIDRs that cover exactly that range). Anything
else is reported with its 1-based line number and skipped.
"""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import IO, Any

from django_bloom.ipblock.ip import IPNetwork, parse_network

MAX_LINE_CHARS = 200
MAX_RANGE_NETWORKS = 256  # a range needs at most 2 * bits networks; more is nonsense

Source = str | os.PathLike | IO[str] | IO[bytes] | Iterable[str | bytes]


@dataclass(frozen=True)
class BadLine:
    lineno: int
    line: str
    message: str


@dataclass(frozen=True)
class NetsetEntry:
    lineno: int
    network: IPNetwork

    @property
    def text(self) -> str:
        return str(self.network)


def iter_lines(source: Source) -> Iterator[str | bytes]:
    """Lines of a path, an open file (text or binary) or an iterable of lines.

    A ``str`` is a path, never content: pass a list of lines for content.
    """
    if isinstance(source, (str, os.PathLike)):
        with open(source, "rb") as fh:
            yield from fh
        return
    if isinstance(source, bytes):
        raise TypeError("pass a path, an open file or an iterable of lines, not bytes")
    yield from source


def _parse_range(text: str) -> list[IPNetwork]:
    first_text, last_text = (part.strip() for part in text.split("-", 1))
    try:
        first = ipaddress.ip_address(first_text)
        last = ipaddress.ip_address(last_text)
    except ValueError as exc:
        raise ValueError(
            f"{text!r} is not an IP address, CIDR network or first-last range ({exc})"
        ) from None
    if first.version != last.version:
        raise ValueError(f"range {text!r} mixes IPv4 and IPv6")
    if first > last:
        raise ValueError(f"range {text!r} ends before it starts")
    networks = list(ipaddress.summarize_address_range(first, last))
    if len(networks) > MAX_RANGE_NETWORKS:  # pragma: no cover - impossible by construction
        raise ValueError(f"range {text!r} is too fragmented")
    return [parse_network(n) for n in networks]


def parse_line(line: str) -> list[IPNetwork]:
    """Networks on one line ([] for blanks and comments); raises ``ValueError``."""
    text = line.split("#", 1)[0].split(";", 1)[0].strip()
    if not text:
        return []
    if len(text) > MAX_LINE_CHARS:
        raise ValueError(f"line longer than {MAX_LINE_CHARS} characters")
    if len(text.split()) > 1:
        raise ValueError(f"expected one address or network per line, got {text!r}")
    if "-" in text:
        return _parse_range(text)
    return [parse_network(text)]


def parse_netset(source: Source) -> tuple[list[NetsetEntry], list[BadLine]]:
    """All entries and all bad lines of a netset, in file order."""
    entries: list[NetsetEntry] = []
    errors: list[BadLine] = []
    for lineno, raw in enumerate(iter_lines(source), start=1):
        if isinstance(raw, bytes):
            try:
                raw = raw.decode("utf-8")
            except UnicodeDecodeError:
                errors.append(BadLine(lineno, raw.decode("utf-8", "replace"), "not UTF-8 text"))
                continue
        line = raw.rstrip("\r\n")
        if lineno == 1:
            line = line.lstrip("\ufeff")
        try:
            networks = parse_line(line)
        except ValueError as exc:
            errors.append(BadLine(lineno, line, str(exc)))
            continue
        entries.extend(NetsetEntry(lineno, n) for n in networks)
    return entries, errors


def dedupe(entries: Iterable[NetsetEntry]) -> tuple[list[str], int]:
    """Unique network texts in first-seen order, and how many repeats were dropped."""
    seen: dict[str, None] = {}
    repeats = 0
    for entry in entries:
        text = entry.text
        if text in seen:
            repeats += 1
        else:
            seen[text] = None
    return list(seen), repeats


__all__: list[Any] = ["BadLine", "NetsetEntry", "parse_line", "parse_netset", "dedupe"]
