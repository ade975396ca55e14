"""What ``manage.py bloom`` prints besides its one-line messages: counted nouns, aligned
tables, JSON, the breaker lines and the ``stats`` table and details (a scalable filter's
sub-filters, the family figures ``bloom stats FAMILY`` prints)."""

from __future__ import annotations

import json
import math
import time
from typing import Any

from django_bloom.engine.transport.breaker import states as breaker_states
from django_bloom.management.cli import UNIT_SECONDS
from django_bloom.ops.formatting import human_bytes


def counted(n: int, one: str, many: str) -> str:
    return f"{n:,} {one if n == 1 else many}"


def table(rows: list[list[str]], right: set[int]) -> str:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = []
    for row in rows:
        cells = [
            cell.rjust(widths[i]) if i in right else cell.ljust(widths[i])
            for i, cell in enumerate(row)
        ]
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines)


def json_dumps(data: Any) -> str:
    def finite(value: Any) -> Any:
        if isinstance(value, float) and not math.isfinite(value):
            return None
        if isinstance(value, dict):
            return {k: finite(v) for k, v in value.items()}
        if isinstance(value, list):
            return [finite(v) for v in value]
        return value

    return json.dumps(finite(data), indent=2)


def breaker_lines() -> str:
    """This process's circuit breakers (see django_bloom.breaker), one line per alias;
    "" while every one is closed."""
    states = breaker_states()
    if all(s["state"] == "closed" for s in states):
        return ""
    lines = ["Circuit breakers (this process):"]
    for s in states:
        line = f"  {s['alias']}: {s['state']}"
        if s["state"] != "closed":
            wait = max(0.0, s["retry_at"] - time.time())
            line += f" after {s['failures']} failure(s), next probe in {wait:.1f} s"
            line += f" (last error: {s['last_error']})"
        lines.append(line)
    return "\n".join(lines)


STATS_COLUMNS = (
    "NAME", "KIND", "CAPACITY", "EST. ITEMS", "USED", "BITS SET", "FPR NOW", "TARGET", "MEMORY",
    "STATE",
)  # fmt: skip


def stats_table(reports: list[dict[str, Any]]) -> str:
    return table([list(STATS_COLUMNS), *map(stats_row, reports)], right={2, 3, 4, 5, 6, 7, 8})


def stats_row(entry: dict[str, Any]) -> list[str]:
    """A ``stats`` entry's row: a filter's, a member's (``name[member]``), a family's or,
    Redis not answering, the row's capacity and target only."""
    name, kind, state = entry["name"], entry["kind"], entry["state"]
    if entry.get("member") is not None:
        name = f"{name}[{entry['member']}]"
    capacity, target = f"{entry['capacity']:,}", f"{entry['error_rate']:g}"
    if state == "unavailable":
        return [name, kind, capacity, "-", "-", "-", "-", target, "-", state]
    estimate = entry.get("estimated_items", 0)  # a family has none; None: every bit set
    if kind == "family":  # USED, BITS SET, FPR NOW: the fullest sampled member's
        capacity, items, missing = f"{capacity}/member", "-", "-"
        state = f"{entry['members']:,} members" if state == "ok" else "lost"
    else:  # an infinite estimate
        missing = "inf"
        items = missing if estimate is None else f"{round(estimate):,}"
    used = None if estimate is None else entry["capacity_used"]
    cells = ((used, ".1%"), (entry["fill_ratio"], ".1%"), (entry["current_fpr"], ".2g"))
    figures = [missing if value is None else format(value, spec) for value, spec in cells]
    memory = human_bytes(entry["memory_bytes"])
    return [name, kind, capacity, items, *figures, target, memory, state]


def details_lines(reports: list[dict[str, Any]]) -> str:
    """Below the table: what a layout adds to its stats (a scalable filter's sub-filters)."""
    lines = []
    for entry in reports:
        details = entry.get("details") or {}
        if "sub_filters" in details:
            lines.append(
                f"{entry['name']}: {counted(details['sub_filters'], 'sub-filter', 'sub-filters')} "
                f"(growth x{details['growth']}, tightening {details['tightening']:g}), "
                f"{details['items_in_newest']:,} items in the newest, "
                f"{human_bytes(entry['memory_bytes'])} in Redis; compound FPR "
                f"{details['compound_fpr']:.2g} (bound {details['fpr_bound']:g})"
            )
            for sub in details["sub_filter_stats"]:
                lines.append(
                    f"  #{sub['index']}: capacity {sub['capacity']:,}, "
                    f"target {sub['error_rate']:.3g}, {sub['fill_ratio']:.1%} of "
                    f"{sub['num_bits']:,} bits set, FPR now {sub['fpr']:.2g}"
                )
    return "\n".join(lines)


def ttl_text(seconds: int | None) -> str:
    if not seconds:
        return "never"
    for unit in "wdhm":
        if seconds % UNIT_SECONDS[unit] == 0:
            return f"{seconds // UNIT_SECONDS[unit]}{unit}"
    return f"{seconds}s"


def family_lines(entry: dict[str, Any]) -> str:
    """The family figures below the table: members, memory, TTL, per-member size."""
    if entry["state"] == "unavailable":
        return f"{entry['name']}: family unavailable: {entry['error']}"
    members = f"{entry['members']:,}" + ("" if entry["members_complete"] else "+")
    lines = [
        f"{entry['name']}: filter family, {members} member(s) with a key"
        + ("" if entry["members_complete"] else " (SCAN stopped at its limit: at least)"),
        f"  memory      ~{human_bytes(entry['memory_bytes'])} "
        f"(mean of {entry['memory_sampled']} sampled member(s) x members)",
        f"  per member  capacity {entry['capacity']:,}, error rate {entry['error_rate']:g}, "
        f"{human_bytes(entry['key_bytes'])}, expires {ttl_text(entry['member_ttl'])} "
        "after its last write",
        f"  items added {entry['items_added']:,} (all members, app count)",
    ]
    if entry["state"] == "lost":
        lines.append(
            "  LOST: the family's control key is missing (Redis lost its data?): members "
            "cannot answer; delete and recreate the family"
        )
    return "\n".join(lines)
