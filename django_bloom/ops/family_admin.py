"""The admin's view of filter families: one row per family (member count, memory),
and the family panel of its change page. Figures come from ``Family.stats()``
(bounded SCAN + sampled MEMORY USAGE) through ``monitoring.row_stats``, which keeps
them for ``STATS_TTL_SECONDS`` per process, so a list page asks Redis once per
family, not once per column."""

from __future__ import annotations

from typing import Any

from django.utils.translation import gettext as _
from django.utils.translation import ngettext

from django_bloom.ops import formatting
from django_bloom.ops.admin_support import quiet_html


def members_text(stats: Any) -> str:
    count = formatting.number(stats.members)
    text = ngettext("%(count)s member", "%(count)s members", stats.members) % {"count": count}
    if not stats.members_complete:
        text = _("at least %(members)s") % {"members": text}
    return text


def members_html(stats: Any) -> str:
    return quiet_html(
        members_text(stats),
        _("family, %(capacity)s items each") % {"capacity": formatting.number(stats.capacity)},
    )


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


def family_figures(stats: Any) -> list[tuple[str, str]]:
    """The change page's Family panel, as (label, text) pairs."""
    return [
        (_("members with a key"), members_text(stats)),
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
