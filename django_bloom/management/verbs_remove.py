"""``bloom remove NAME ITEM...``: take items out of a counting filter (layout ``counting``).

Exit codes as elsewhere: 0 every item was removed, 1 some item was refused because it
was certainly absent (nothing written for it), 2 error (a filter of another layout,
bad input: nothing is written).
"""

from __future__ import annotations

from django_bloom.management.cli import ADD_BATCH, EXIT_ABSENT, Progress, fail, normalizer_for


class RemoveVerbs:
    """Mixed into ``bloom``'s Command (uses its say, filter, read_lines, streams)."""

    @staticmethod
    def add_remove_parser(sub) -> None:
        p = sub.add_parser(
            "remove",
            help="Remove items from a counting filter (arguments, or --file, '-' for stdin). "
            "Exit 1 if an item was certainly absent (refused).",
        )
        p.add_argument("name")
        p.add_argument("items", nargs="*")
        p.add_argument("--file", default=None, help="one item per line; '-' reads stdin")

    def cmd_remove(self, name, items, file, **_):
        if not items and file is None:
            raise fail("nothing to remove: give items as arguments or --file PATH ('-' for stdin)")
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
        normalize = normalizer_for(f.meta)
        numbered = [(None, item) for item in items]
        if file is not None:
            numbered += [
                (lineno, line.strip())
                for lineno, line in enumerate(self.read_lines(file), 1)
                if line.strip()
            ]
        values = []
        for lineno, raw in numbered:  # every item checked before the first write
            try:
                value = normalize(raw)
                f.validate_items([value])
            except (ValueError, TypeError) as exc:
                where = f"line {lineno}" if lineno else "argument"
                raise fail(f"{where}: cannot remove {raw!r}: {exc}. Nothing was removed.") from None
            values.append(value)
        progress = Progress(self.stderr, f"removing from {name}", len(values))
        removed = 0
        for start in range(0, len(values), ADD_BATCH):
            removed += sum(f.remove_many(values[start : start + ADD_BATCH]))
            progress.update(min(start + ADD_BATCH, len(values)))
        progress.finish(len(values))
        refused = len(values) - removed
        self.say(
            f"{len(values):,} items: {removed:,} removed, {refused:,} refused (certainly "
            f"absent from {name!r}: nothing written for them)."
        )
        if refused:
            raise SystemExit(EXIT_ABSENT)
