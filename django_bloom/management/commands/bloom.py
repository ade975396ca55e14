"""``manage.py bloom <subcommand>``: create, fill, query, inspect and repair filters.

Exit codes are meant for shell scripts: 0 success (``check``: maybe present),
1 ``check``: certainly absent (``clear``, ``delete``: cancelled; ``verify``: Redis lacked
bits the source needs, repaired or not), 2 error (unknown
filter, Redis unavailable, bad input, ...). Errors raise ``CommandError`` with
``returncode=2``; ``check``'s "absent" raises ``SystemExit(1)`` after printing,
so ``call_command`` callers see the same codes a shell does.

Bad input writes nothing: arguments and items are validated before the first
write. Progress is drawn on stderr only when stderr is a terminal.
"""

from __future__ import annotations

import sys
from typing import Any

from django.core.management.base import BaseCommand

from django_bloom.engine.kinds import layout_names
from django_bloom.management.cli import (
    EXIT_ABSENT,
    KINDS,
    add_items_arguments,
    add_json_option,
    add_member_option,
    batches,
    duration_seconds,
    error_rate,
    expiry,
    fail,
    glue_option_values,
    layout_options,
    positive_int,
    require_items,
    validate_normalizer,
    validate_source,
)
from django_bloom.management.output import counted
from django_bloom.management.verbs_blocklist import BlocklistVerbs
from django_bloom.management.verbs_delete import DeleteVerbs
from django_bloom.management.verbs_inspect import InspectVerbs
from django_bloom.management.verbs_rebuild import RebuildVerbs
from django_bloom.management.verbs_remove import RemoveVerbs
from django_bloom.ops.formatting import human_bytes

# create_filter's keywords that ``bloom create`` passes on as given (its --option
# values are read first: layout_options).
CREATE_KEYWORDS = (
    "capacity", "error_rate", "description", "kind", "layout", "cache_alias", "source",
    "normalizer", "hasher", "family", "member_ttl",
)  # fmt: skip


class Command(BlocklistVerbs, DeleteVerbs, InspectVerbs, RebuildVerbs, RemoveVerbs, BaseCommand):
    help = (
        "Manage django-bloom filters: create, add, remove, check, stats, rebuild, verify, clear, "
        "delete, measure, import-blocklist. Exit codes: 0 ok, 1 check: absent (remove: refused; "
        "clear, delete: cancelled), 2 error."
    )
    stealth_options = ("stdin",)

    def create_parser(self, prog_name: str, subcommand: str, **kwargs: Any):
        parser = super().create_parser(prog_name, subcommand, **kwargs)
        parse_args = parser.parse_args

        def parse_glued(args=None, namespace=None):
            if args is not None:
                args = glue_option_values([str(a) for a in args], ("--expires",))
            return parse_args(args, namespace)

        parser.parse_args = parse_glued
        return parser

    # -- parser -----------------------------------------------------------------
    def add_arguments(self, parser) -> None:
        sub = parser.add_subparsers(dest="subcommand", metavar="SUBCOMMAND", required=True)

        p = sub.add_parser("create", help="Create a filter (metadata row + full-size Redis key).")
        p.add_argument("name")
        p.add_argument("--capacity", type=positive_int, required=True, help="expected items n")
        p.add_argument(
            "--error-rate", type=error_rate, default=0.01, help="target FPR p (default 0.01)"
        )
        p.add_argument("--description", default="")
        p.add_argument("--kind", default="generic", choices=KINDS, help="default generic")
        p.add_argument(
            "--layout",
            default="standard",
            choices=layout_names(),
            help="standard (default); blocked: one 64-bit word per item, faster reads, "
            "more memory; counting: 4-bit counters, items can be removed, 4x the memory; "
            "rotating: time windows of slices that expire; scalable: grows when full",
        )
        p.add_argument(
            "--option",
            action="append",
            dest="options",
            metavar="KEY=VALUE",
            help="a layout option, repeatable; VALUE is read as JSON, else as text "
            "(rotating: slices=24 slice_seconds=3600; scalable: growth=2 tightening=0.85)",
        )
        p.add_argument("--cache-alias", default=None, help="django-redis alias (default: setting)")
        p.add_argument("--source", default="", help="bound field as app_label.Model.field")
        p.add_argument(
            "--normalizer", default="", help="username, email, email_ci or a dotted path"
        )
        p.add_argument(
            "--hasher",
            choices=["blake2b", "murmur3"],
            default="blake2b",
            help="blake2b (keyed, default: items cannot be aimed at bits) or murmur3 (legacy)",
        )
        p.add_argument(
            "--family",
            action="store_true",
            help="a filter family: one filter of this size per member, created on first write",
        )
        p.add_argument(
            "--member-ttl",
            type=duration_seconds,
            default=None,
            help="family members expire this long after their last write (seconds, or 30d)",
        )

        p = sub.add_parser("add", help="Add items (arguments, or --file, '-' for stdin).")
        p.add_argument("name")
        add_items_arguments(p)
        add_member_option(p)

        self.add_remove_parser(sub)

        p = sub.add_parser("check", help="Exit 0 if ITEM is maybe present, 1 if absent.")
        p.add_argument("name")
        p.add_argument("item")
        add_member_option(p)

        p = sub.add_parser("stats", help="Fill, estimated items and FPR of filters.")
        p.add_argument("names", nargs="*", metavar="name")
        add_json_option(p)
        p.add_argument("--record", action="store_true", help="store a FilterSnapshot (cron)")
        add_member_option(p)

        self.add_rebuild_parser(sub)
        self.add_clear_parser(sub)
        self.add_delete_parser(sub)

        p = sub.add_parser(
            "verify",
            help="Compare a bound filter with its source: exit 1 if Redis lacks bits it needs.",
        )
        p.add_argument("name")
        p.add_argument("--repair", action="store_true", help="set the missing bits (only those)")
        p.add_argument(
            "--chunk-bytes", type=positive_int, default=None, help="bytes per GETRANGE (1 MiB)"
        )

        p = sub.add_parser("measure", help="Empirical FPR from random probes; writes nothing.")
        p.add_argument("name")
        p.add_argument("--probes", type=positive_int, default=100_000)
        add_member_option(p)
        add_json_option(p)

        p = sub.add_parser("import-blocklist", help="Import a FireHOL/ipset netset file.")
        p.add_argument("file", help="path, or '-' for stdin")
        p.add_argument("--reason", default="")
        p.add_argument(
            "--expires", type=expiry, default=None, help="date, datetime or duration (7d)"
        )
        p.add_argument("--list-name", default=None)
        p.add_argument("--strict", action="store_true", help="any bad line: import nothing, exit 2")

    def handle(self, *args: Any, **options: Any) -> None:
        from django_bloom.exceptions import BloomError, FilterNotFound

        self.options = options
        self.verbosity = options.get("verbosity", 1)
        method = getattr(self, "cmd_" + options["subcommand"].replace("-", "_"))
        try:
            method(**options)
        except FilterNotFound as exc:
            raise fail(f"{exc}. List filters with: manage.py bloom stats") from None
        except BloomError as exc:
            raise fail(str(exc)) from None

    def say(self, message: str) -> None:
        if self.verbosity >= 1:
            self.stdout.write(message)

    def filter(self, name: str, member: str | None = None):
        from django_bloom.services import get_filter

        return get_filter(name, refresh=True, member=member)

    def read_lines(self, path: str, errors: str = "strict") -> list[str]:
        """Lines of a UTF-8 file or stdin ('-'); ``errors="replace"`` keeps bad bytes per line."""
        try:
            if path == "-":
                stream = self.options.get("stdin") or sys.stdin
                return stream.read().splitlines()
            with open(path, encoding="utf-8", errors=errors) as fh:
                return fh.read().splitlines()
        except OSError as exc:
            raise fail(f"cannot read {path}: {exc.strerror or exc}") from None
        except UnicodeDecodeError as exc:
            raise fail(f"{path} is not UTF-8 text: {exc}") from None

    # -- subcommands ----------------------------------------------------------------
    def cmd_create(self, name, options=None, **given):
        from django_bloom.services import create_filter

        fields = {keyword: given[keyword] for keyword in CREATE_KEYWORDS}
        if fields["source"]:
            validate_source(fields["source"])
        if fields["normalizer"]:
            validate_normalizer(fields["normalizer"])
        try:
            f = create_filter(name, options=layout_options(options), **fields)
        except (ValueError, TypeError) as exc:
            raise fail(str(exc)) from None
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

    def cmd_add(self, name, items, file, member=None, **_):
        require_items(items, file, "add")
        f = self.member_filter(name, member)
        if f.meta.kind == "blocklist":
            raise fail(
                f"{name!r} is an IP blocklist: its BlockedEntry rows are the truth and filter "
                "hits are confirmed against them, so add entries with: manage.py bloom "
                f"import-blocklist FILE --list-name {name} (or the admin)"
            )
        values = self.item_values(f, items, file, "add", "added")
        new = self.in_batches(f.add_many, values, f"adding to {name}")
        self.say(
            f"{len(values):,} items: {new:,} new, {len(values) - new:,} already (maybe) present "
            f"in {self.label(name, member)}."
        )

    def item_values(self, f, items, file, verb: str, done: str) -> list:
        """The arguments, then ``--file``'s lines; every one validated (the handle's
        normaliser + encode) before the first write: a bad one writes nothing."""
        numbered = [(None, item) for item in items]
        if file is not None:
            numbered += [
                (lineno, line.strip())
                for lineno, line in enumerate(self.read_lines(file), 1)
                if line.strip()
            ]
        values = []
        for lineno, raw in numbered:
            try:
                f.validate_items([raw])
            except (ValueError, TypeError) as exc:
                where = f"line {lineno}" if lineno else "argument"
                raise fail(f"{where}: cannot {verb} {raw!r}: {exc}. Nothing was {done}.") from None
            values.append(raw)  # the handle normalises it (once) as it writes
        return values

    def in_batches(self, operation, values: list, label: str) -> int:
        """``operation`` (add_many, remove_many) over ``values`` in batches, with a
        progress line; how many answers were True."""
        count = 0
        for start, stop in batches(self.stderr, label, len(values)):
            count += sum(operation(values[start:stop]))
        return count

    def cmd_check(self, name, item, member=None, **_):
        f = self.member_filter(name, member)
        if f.meta.kind == "blocklist":
            return self.check_blocklist(name, item)
        try:
            present = f.contains(item)  # normalised by the handle, as the validator's are
        except (ValueError, TypeError) as exc:
            raise fail(f"cannot check {item!r}: {exc}") from None
        if present:
            self.say("maybe present")
            return
        self.say("absent")
        raise SystemExit(EXIT_ABSENT)

    def member_filter(self, name: str, member: str | None):
        """The filter, or a family member's (``--member``); errors name the option."""
        from django_bloom.exceptions import FamilyMisuse

        try:
            return self.filter(name, member)
        except FamilyMisuse as exc:
            hint = " (give --member MEMBER)" if member is None else " (drop --member)"
            raise fail(f"{exc}{hint}") from None
        except (ValueError, TypeError) as exc:
            raise fail(f"--member {member!r}: {exc}") from None

    def family_or_filter(self, name: str, member: str | None):
        """With no ``--member``, a family's handle (the whole family: ``stats``, ``clear``)
        or a filter's; with one, the member's (``member_filter``)."""
        from django_bloom.exceptions import FamilyMisuse
        from django_bloom.services import get_family

        if member is not None:
            return self.member_filter(name, member)
        try:
            return self.filter(name)
        except FamilyMisuse:  # the row (just read) is a family's: no second query
            return get_family(name)

    @staticmethod
    def label(name: str, member: str | None) -> str:
        return repr(name) if member is None else f"{name!r} member {member!r}"


# -- helpers --------------------------------------------------------------------
