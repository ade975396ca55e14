"""The figures the BloomFilter admin pages show: the list's items and memory texts,
the detail page's Capacity and Unique validator panels, as (label, text) pairs.

Each kind adds its own (a rotating window, a scalable filter's sub-filters, a
counting filter's memory, a sharded filter's segments) from ``FilterStats.details``.

Filter families are one row each (members, memory, the fullest sampled member's fill)
and have a Family panel instead, from ``Family.stats()`` (bounded SCAN, one pipeline of
a sample's MEMORY USAGE and BITCOUNT) through ``monitoring.row_stats``, which keeps them
for ``STATS_TTL_SECONDS`` per process: a list page asks Redis once per family, not per column.
"""

from __future__ import annotations

from typing import Any

from django.utils.translation import gettext_lazy as _
from django.utils.translation import ngettext

from django_bloom.ops import formatting, monitoring
from django_bloom.ops.admin_support import health_html


def items_text(stats: Any, decimals: int = 1) -> str:
    """``850 / 1,000 (85%)``: estimated items against capacity."""
    if stats.estimated_items == float("inf"):
        return str(_("full"))
    return (
        f"{formatting.number(stats.estimated_items)} / {formatting.number(stats.capacity)} "
        f"({formatting.percent(stats.capacity_used, decimals)})"
    )


def capacity_figures(stats: Any) -> list[tuple[str, str]]:
    """The detail page's Capacity panel, as (label, text) pairs."""
    return [
        (_("health"), health_html(monitoring.health(stats))),
        (_("estimated items / capacity"), items_text(stats)),
        (
            _("bits set"),
            _("%(fill)s (%(set)s of %(all)s)")
            % {
                "fill": formatting.percent(stats.fill_ratio),
                "set": formatting.number(stats.bits_set),
                "all": formatting.number(stats.num_bits),
            },
        ),
        (_("false positives now"), formatting.fpr_words(stats.current_fpr)),
        (_("false positives, target"), formatting.one_in(stats.error_rate)),
        (_("memory in Redis"), memory_text(stats)),
        (_("items added (app count)"), formatting.number(stats.items_added)),
        *window_figures(stats.details),
        *layout_figures(stats),
        *segment_figures(stats),
    ]


def segment_figures(stats: Any) -> list[tuple[str, str]]:
    """A sharded filter's keys: the memory above is the sum over them."""
    if stats.segments <= 1 or "sub_filters" in stats.details:
        return []
    return [(_("segments (Redis keys)"), formatting.number(stats.segments))]


def window_figures(details: dict[str, Any]) -> list[tuple[str, str]]:
    """A rotating window's figures (``FilterStats.details`` of layout ``rotating``);
    nothing for layouts whose details hold no window."""
    if "window_seconds" not in details:
        return []
    return [
        (
            _("time window"),
            _("%(slices)s slices of %(seconds)s s (%(window)s s); %(live)s live")
            % {
                "slices": formatting.number(details["slices"]),
                "seconds": formatting.number(details["slice_seconds"]),
                "window": formatting.number(details["window_seconds"]),
                "live": formatting.number(details["slices_live"]),
            },
        ),
        (_("items in the window (estimate)"), formatting.number(details["items_in_window"])),
        (_("false positives over the window"), formatting.fpr_words(details["window_fpr"])),
    ]


def sub_filters_text(stats: Any) -> str:
    """``4 sub-filters`` for a filter that grows; "" for one-key filters."""
    count = stats.details.get("sub_filters")
    if count is None:
        return ""
    return ngettext("%(count)s sub-filter", "%(count)s sub-filters", count) % {
        "count": formatting.number(count)
    }


def layout_figures(stats: Any) -> list[tuple[str, str]]:
    """What a layout adds to the Capacity panel (``FilterStats.details``)."""
    details = stats.details
    if "sub_filters" not in details:
        return []
    return [
        (
            _("sub-filters"),
            _("%(count)s (growth ×%(growth)s, tightening %(tightening)s)")
            % {
                "count": formatting.number(details["sub_filters"]),
                "growth": details["growth"],
                "tightening": details["tightening"],
            },
        ),
        (_("items in the newest sub-filter"), formatting.number(details["items_in_newest"])),
        (_("capacity before the next growth"), formatting.number(details["capacity"])),
        (_("false positives, bound"), formatting.one_in(details["fpr_bound"])),
    ]


def memory_text(stats: Any) -> str:
    """Redis memory; for a counting filter, why it is several times a plain filter's."""
    text = formatting.human_bytes(stats.memory_bytes)
    per = stats.bits_per_position
    if per > 1:
        text = _("%(memory)s (counting: %(bits)s bits per position, %(bits)sx a plain filter)") % {
            "memory": text,
            "bits": per,
        }
    return text


def counters_text(stats: Any) -> str:
    """``counting, 4x a plain filter`` for a counting filter; "" otherwise."""
    per = stats.bits_per_position
    return _("counting, %(bits)sx a plain filter") % {"bits": per} if per > 1 else ""


def validator_figures(found: dict[str, Any]) -> list[tuple[str, str]]:
    """The Unique validator panel: what the filter saved the database."""
    observed = found["observed_fpr"]
    if observed is None:
        rate = formatting.DASH
    elif observed == 0:
        rate = _("none observed")
    else:
        rate = formatting.fpr_words(observed)
    return [
        (_("database queries skipped (“absent”)"), formatting.number(found["db_skipped"])),
        (_("“maybe” confirmed by the database"), formatting.number(found["db_confirmed"])),
        (_("observed false positives"), formatting.number(found["false_positives"])),
        (_("observed false-positive rate"), rate),
        (
            _("answered by the database (filter unavailable)"),
            formatting.number(found["unavailable"]),
        ),
    ]


def members_text(stats: Any) -> str:
    count = formatting.number(stats.members)
    text = ngettext("%(count)s member", "%(count)s members", stats.members) % {"count": count}
    if not stats.members_complete:
        text = _("at least %(members)s") % {"members": text}
    return text


def ttl_words(seconds: int | None) -> str:
    if not seconds:
        return _("never")
    days, rest = divmod(seconds, 86400)
    if days and not rest:
        words = ngettext("%(n)s day after its last write", "%(n)s days after its last write", days)
        return words % {"n": formatting.number(days)}
    return ngettext(
        "%(n)s second after its last write", "%(n)s seconds after its last write", seconds
    ) % {"n": formatting.number(seconds)}


def fullest_text(stats: Any) -> str:
    """A family's fill: its fullest sampled member's (what its health goes by)."""
    if stats.capacity_used is None:
        return formatting.DASH
    return _(
        "%(used)s of its capacity, false positives %(fpr)s: the fullest of %(sampled)s "
        "sampled members"
    ) % {
        "used": formatting.percent(stats.capacity_used),
        "fpr": formatting.fpr_words(stats.current_fpr),
        "sampled": formatting.number(stats.memory_sampled),
    }


def family_figures(stats: Any) -> list[tuple[str, str]]:
    """The change page's Family panel, as (label, text) pairs."""
    return [
        (_("health"), health_html(monitoring.health(stats))),
        (_("members with a key"), members_text(stats)),
        (_("fill (sampled)"), fullest_text(stats)),
        (
            _("memory in Redis"),
            _("%(memory)s (estimated from %(sampled)s sampled members)")
            % {
                "memory": formatting.human_bytes(stats.memory_bytes),
                "sampled": formatting.number(stats.memory_sampled),
            },
        ),
        (_("capacity per member"), formatting.number(stats.capacity)),
        (_("false positives, target"), formatting.one_in(stats.error_rate)),
        (_("key size per member"), formatting.human_bytes(stats.key_bytes)),
        (_("a member expires"), ttl_words(stats.member_ttl)),
        (_("items added (app count, all members)"), formatting.number(stats.items_added)),
        (
            _("control key"),
            _("present") if stats.control_present else _("MISSING: members cannot answer"),
        ),
    ]
