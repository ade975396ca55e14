"""What ``manage.py bloom`` prints besides its one-line messages: counted nouns, aligned
tables, JSON, the breaker lines and the ``stats`` table and details."""

from __future__ import annotations

import json
import math
import time
from typing import Any

from django_bloom.engine.transport.breaker import states as breaker_states
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
    """This process's circuit breakers (see django_bloom.breaker), one line per alias."""
    lines = ["Circuit breakers (this process):"]
    for s in breaker_states():
        line = f"  {s['alias']}: {s['state']}"
        if s["state"] != "closed":
            wait = max(0.0, s["retry_at"] - time.time())
            line += f" after {s['failures']} failure(s), next probe in {wait:.1f} s"
            line += f" (last error: {s['last_error']})"
        lines.append(line)
    return "\n".join(lines)


def stats_table(reports: list[dict[str, Any]]) -> str:
    rows = [
        [
            "NAME",
            "KIND",
            "CAPACITY",
            "EST. ITEMS",
            "USED",
            "BITS SET",
            "FPR NOW",
            "TARGET",
            "MEMORY",
            "STATE",
        ]
    ]
    for entry in reports:
        if entry["kind"] == "family" and entry["state"] != "unavailable":
            rows.append(
                [
                    entry["name"],
                    "family",
                    f"{entry['capacity']:,}/member",
                    "-",  # USED, BITS SET, FPR NOW: the fullest sampled member's
                    "-" if entry["capacity_used"] is None else f"{entry['capacity_used']:.1%}",
                    "-" if entry["fill_ratio"] is None else f"{entry['fill_ratio']:.1%}",
                    "-" if entry["current_fpr"] is None else f"{entry['current_fpr']:.2g}",
                    f"{entry['error_rate']:g}",
                    human_bytes(entry["memory_bytes"]),
                    f"{entry['members']:,} members" if entry["state"] == "ok" else "lost",
                ]
            )
            continue
        if entry.get("member") is not None:
            entry = {**entry, "name": f"{entry['name']}[{entry['member']}]"}
        if entry["state"] == "unavailable":
            rows.append(
                [
                    entry["name"],
                    entry["kind"],
                    f"{entry['capacity']:,}",
                    "-",
                    "-",
                    "-",
                    "-",
                    f"{entry['error_rate']:g}",
                    "-",
                    "unavailable",
                ]
            )
            continue
        est = entry["estimated_items"]
        rows.append(
            [
                entry["name"],
                entry["kind"],
                f"{entry['capacity']:,}",
                "inf" if est is None else f"{round(est):,}",
                f"{entry['capacity_used']:.1%}" if est is not None else "inf",
                f"{entry['fill_ratio']:.1%}",
                f"{entry['current_fpr']:.2g}",
                f"{entry['error_rate']:g}",
                human_bytes(entry["memory_bytes"]),
                entry["state"],
            ]
        )
    return table(rows, right={2, 3, 4, 5, 6, 7, 8})


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
