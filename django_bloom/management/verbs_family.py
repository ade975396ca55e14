"""``bloom`` and filter families: the family figures ``bloom stats FAMILY`` prints
(the ``--member`` option and ``--member-ttl``'s type are in cli.py)."""

from __future__ import annotations

from typing import Any

from django_bloom.management.cli import UNIT_SECONDS
from django_bloom.ops.formatting import human_bytes


def unavailable_fields(meta: Any, exc: Exception) -> dict[str, Any]:
    """A ``bloom stats`` entry's fields for a filter or family whose Redis did not answer."""
    return {
        "state": "unavailable",
        "error": str(exc),
        "capacity": meta.capacity,
        "error_rate": meta.error_rate,
    }


def family_entry(family: Any) -> dict[str, Any]:
    """A ``bloom stats`` entry (table row and JSON) of a whole family."""
    from django_bloom.exceptions import FilterUnavailable

    entry: dict[str, Any] = {"name": family.name, "kind": "family"}
    try:
        stats = family.stats()
    except FilterUnavailable as exc:
        entry.update(unavailable_fields(family.meta, exc))
        return entry
    entry.update(stats.as_dict())
    entry["state"] = "ok" if stats.control_present else "lost"
    return entry


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
