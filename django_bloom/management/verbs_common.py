"""``bloom`` verbs every filter has: create one, add items, check an item."""

from __future__ import annotations

from typing import Any

from django_bloom.engine.kinds import layout_choices, layout_names
from django_bloom.management.cli import (
    EXIT_ABSENT,
    KINDS,
    add_items_arguments,
    add_member_option,
    arg,
    duration_seconds,
    error_rate,
    fail,
    layout_options,
    positive_int,
    require_items,
    validate_normalizer,
    validate_source,
    verb,
)
from django_bloom.management.output import counted
from django_bloom.ops.formatting import human_bytes

# create_filter's keywords that ``bloom create`` passes on as given (its --option
# values are read first: layout_options).
CREATE_KEYWORDS = (
    "capacity", "error_rate", "description", "kind", "layout", "cache_alias", "source",
    "normalizer", "hasher", "family", "member_ttl",
)  # fmt: skip


def add_layout_option(parser: Any) -> None:
    """``create --layout``: the layouts registered when the parser is built, described by
    themselves."""
    described = "; ".join(label for _name, label in layout_choices()).replace("%", "%%")
    parser.add_argument(
        "--layout", default="standard", choices=layout_names(), help=described
    )


class CommonVerbs:
    """Mixed into ``bloom``'s Command (uses its say, member_filter, item_values, in_batches,
    label, check_blocklist)."""

    @verb(
        "Create a filter (metadata row + full-size Redis key).",
        arg("name"),
        arg("--capacity", type=positive_int, required=True, help="expected items n"),
        arg("--error-rate", type=error_rate, default=0.01, help="target FPR p (default 0.01)"),
        arg("--description", default=""),
        arg("--kind", default="generic", choices=KINDS, help="default generic"),
        add_layout_option,
        arg(
            "--option",
            action="append",
            dest="options",
            metavar="KEY=VALUE",
            help="a layout option, repeatable; VALUE is read as JSON, else as text "
            "(rotating: slices=24 slice_seconds=3600; scalable: growth=2 tightening=0.85)",
        ),
        arg("--cache-alias", default=None, help="django-redis alias (default: setting)"),
        arg("--source", default="", help="bound field as app_label.Model.field"),
        arg("--normalizer", default="", help="username, email, email_ci or a dotted path"),
        arg(
            "--hasher",
            choices=["blake2b", "murmur3"],
            default="blake2b",
            help="blake2b (keyed, default: items cannot be aimed at bits) or murmur3 (legacy)",
        ),
        arg(
            "--family",
            action="store_true",
            help="a filter family: one filter of this size per member, created on first write",
        ),
        arg(
            "--member-ttl",
            type=duration_seconds,
            default=None,
            help="family members expire this long after their last write (seconds, or 30d)",
        ),
    )
    def cmd_create(self, name, options=None, **given):
        from django_bloom.services import create_filter

        fields = {keyword: given[keyword] for keyword in CREATE_KEYWORDS}
        if fields["source"]:
            validate_source(fields["source"])
        if fields["normalizer"]:
            validate_normalizer(fields["normalizer"])
        with self.failing("", ValueError, TypeError):
            f = create_filter(name, options=layout_options(options), **fields)
        m = f.meta
        if m.family:
            ttl = (
                f"members expire {m.member_ttl:,} s after their last write"
                if m.member_ttl
                else ("members never expire")
            )
            self.say(
                f"Created filter family {m.name!r}: per member capacity {m.capacity:,}, error "
                f"rate {m.error_rate:g}, {m.layout} layout, {human_bytes(f.layout.key_bytes)} "
                f"per member key (created on its first write); {ttl}."
            )
            return
        self.say(
            f"Created filter {m.name!r} ({m.kind}): capacity {m.capacity:,}, "
            f"error rate {m.error_rate:g}, {m.layout} layout, {counted(m.num_bits, 'bit', 'bits')} "
            f"({human_bytes(f.key_bytes)}), {counted(m.num_hashes, 'hash', 'hashes')}, "
            f"{f.hasher.scheme} hashing, cache alias {m.cache_alias!r}."
        )

    @verb(
        "Add items (arguments, or --file, '-' for stdin).",
        arg("name"),
        add_items_arguments,
        add_member_option,
    )
    def cmd_add(self, name, items, file, member=None, **_):
        require_items(items, file, "add")
        f = self.member_filter(name, member)
        if f.meta.kind == "blocklist":
            raise fail(
                f"{name!r} is an IP blocklist: its BlockedEntry rows are the truth and filter "
                "hits are confirmed against them, so add entries with: manage.py bloom "
                f"import-blocklist FILE --list-name {name} (or the admin)"
            )
        total, values = self.item_values(f, items, file, "add", "added")
        new = self.in_batches(f.add_many, values, total, f"adding to {name}")
        self.say(
            f"{counted(total, 'item', 'items')}: {new:,} new, {total - new:,} "
            f"already (maybe) present in {self.label(name, member)}."
        )

    @verb(
        "Exit 0 if ITEM is maybe present, 1 if absent. With --file ('-': stdin): print the "
        "lines that may be present (--absent: those certainly absent) and a count on stderr; "
        "exit 0 if some line may be present, 1 if none.",
        arg("name"),
        arg("item", nargs="?"),
        arg("--file", default=None, help="one item per line; '-' reads stdin"),
        arg("--absent", action="store_true", help="with --file: print the absent lines"),
        add_member_option,
    )
    def cmd_check(self, name, item, file=None, absent=False, member=None, **_):
        if (item is None) == (file is None):
            raise fail("give one ITEM, or --file PATH ('-' for stdin)")
        f = self.member_filter(name, member)
        if f.meta.kind == "blocklist":
            if file is not None:
                raise fail(f"{name!r} is an IP blocklist: check one address at a time")
            return self.check_blocklist(name, item)
        if file is not None:
            return self.check_lines(f, name, file, absent)
        with self.failing(f"cannot check {item!r}: ", ValueError, TypeError):
            present = f.contains(item)  # normalised by the handle, as the validator's are
        if present:
            self.say("maybe present")
            return
        self.say("absent")
        raise SystemExit(EXIT_ABSENT)

    def check_lines(self, f, name: str, file: str, absent: bool) -> None:
        """``check --file``: the lines that may be present (or, ``absent``, those that are
        not) on stdout as they are answered, a batch at a time; the counts on stderr."""
        lines = present = 0
        numbered = self.item_lines(file)
        for chunk, answers in self.answered(
            f, f.contains_many, numbered, "check", label=f"checking {name}"
        ):
            shown = [raw for (_, raw), maybe in zip(chunk, answers, strict=True) if maybe != absent]
            if shown:
                self.stdout.write("\n".join(shown))
            lines, present = lines + len(chunk), present + answers.count(True)
        if self.verbosity >= 1:
            self.stderr.write(
                f"{counted(lines, 'line', 'lines')}: {present:,} maybe present, "
                f"{lines - present:,} absent from {self.label(name, f.member)}."
            )
        if not present:
            raise SystemExit(EXIT_ABSENT)
