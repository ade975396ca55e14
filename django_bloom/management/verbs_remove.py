"""``bloom remove NAME ITEM...``: take items out of a counting filter (layout ``counting``).

Exit codes as elsewhere: 0 every item was removed, 1 some item was refused because it
was certainly absent (nothing written for it), 2 error (a filter of another layout,
bad input: nothing is written).
"""

from __future__ import annotations

from django_bloom.management.cli import (
    EXIT_ABSENT,
    add_items_arguments,
    arg,
    fail,
    require_items,
    verb,
)
from django_bloom.management.output import counted


class RemoveVerbs:
    """Mixed into ``bloom``'s Command (uses its say, filter, read_lines, streams)."""

    @verb(
        "Remove items from a counting filter (arguments, or --file, '-' for stdin). "
        "Exit 1 if an item was certainly absent (refused).",
        arg("name"),
        add_items_arguments,
    )
    def cmd_remove(self, name, items, file, **_):
        require_items(items, file, "remove")
        f = self.filter(name)
        if f.meta.kind == "blocklist":
            raise fail(
                f"{name!r} is an IP blocklist: unblock entries instead (the admin, or "
                "django_bloom.ipblock.service.unblock); a counting blocklist then removes "
                "them from the filter at once"
            )
        if not f.can_remove:
            raise fail(
                f"filter {name!r} ({f.meta.layout} layout) cannot remove items: a Bloom "
                "filter's bits are shared between items. Create it with --layout counting "
                "to remove, or rebuild it without the items."
            )
        total, values = self.item_values(f, items, file, "remove", "removed")
        removed = self.in_batches(f.remove_many, values, total, f"removing from {name}")
        refused = total - removed
        self.say(
            f"{counted(total, 'item', 'items')}: {removed:,} removed, {refused:,} refused "
            f"(certainly absent from {name!r}: nothing written for them)."
        )
        if refused:
            raise SystemExit(EXIT_ABSENT)
