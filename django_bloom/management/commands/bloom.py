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
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from itertools import chain
from typing import Any

from django.core.management.base import BaseCommand

from django_bloom.management.cli import (
    add_verb_parsers,
    batches,
    fail,
    glue_option_values,
    verb_handler,
)
from django_bloom.management.verbs_blocklist import BlocklistVerbs
from django_bloom.management.verbs_common import CommonVerbs
from django_bloom.management.verbs_delete import DeleteVerbs
from django_bloom.management.verbs_inspect import InspectVerbs
from django_bloom.management.verbs_rebuild import RebuildVerbs
from django_bloom.management.verbs_remove import RemoveVerbs
from django_bloom.management.verbs_transfer import TransferVerbs


class Command(
    CommonVerbs,
    BlocklistVerbs,
    DeleteVerbs,
    InspectVerbs,
    RebuildVerbs,
    RemoveVerbs,
    TransferVerbs,
    BaseCommand,
):
    help = (
        "Manage django-bloom filters: create, add, remove, check, stats, rebuild, verify, clear, "
        "delete, measure, import-blocklist, blocklist report, export, import, merge. Exit codes: "
        "0 ok, 1 check: absent (remove: refused; clear, delete: cancelled), 2 error."
    )
    stealth_options = ("stdin",)
    # The verbs in the order ``--help`` lists them; each one's parser is declared on its
    # handler, ``cmd_<verb>`` in a verbs_*.py module (cli.verb).
    verbs = (
        "create", "add", "remove", "check", "stats", "rebuild", "clear", "delete", "verify",
        "measure", "import-blocklist", "blocklist", "export", "import", "merge",
    )  # fmt: skip

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
        add_verb_parsers(sub, self, self.verbs)

    def handle(self, *args: Any, **options: Any) -> None:
        from django_bloom.exceptions import BloomError, FilterNotFound

        self.options = options
        self.verbosity = options.get("verbosity", 1)
        method = verb_handler(self, options["subcommand"])
        try:
            method(**options)
        except FilterNotFound as exc:
            raise fail(f"{exc}. List filters with: manage.py bloom stats") from None
        except BloomError as exc:
            raise fail(str(exc)) from None

    def say(self, message: str) -> None:
        if self.verbosity >= 1:
            self.stdout.write(message)

    @contextmanager
    def failing(self, prefix: str, *errors: type[Exception], suffix: str = "") -> Iterator[None]:
        """One of ``errors`` raised inside becomes ``fail(prefix + the error + suffix)``: a
        verb's words for what it could not do around the reason (exit 2)."""
        try:
            yield
        except errors as exc:
            raise fail(f"{prefix}{exc}{suffix}") from None

    def filter(self, name: str, member: str | None = None):
        from django_bloom.services import get_filter

        return get_filter(name, refresh=True, member=member)

    def read_lines(self, path: str, errors: str = "strict") -> Iterator[str]:
        """Lines of a UTF-8 file or stdin ('-'), read one at a time (split as
        ``str.splitlines`` splits); ``errors="replace"`` keeps bad bytes per line."""
        stdin = self.options.get("stdin") or sys.stdin
        try:
            with (
                nullcontext(stdin)
                if path == "-"
                else open(path, encoding="utf-8", errors=errors) as stream
            ):
                for line in stream:
                    yield from line.splitlines()
        except OSError as exc:
            raise fail(f"cannot read {path}: {exc.strerror or exc}") from None
        except UnicodeDecodeError as exc:
            raise fail(f"{path} is not UTF-8 text: {exc}") from None

    def item_lines(self, path: str) -> Iterator[tuple[int, str]]:
        """(line number, stripped line) of each non-blank line of ``path`` (``read_lines``)."""
        return (
            (n, line.strip()) for n, line in enumerate(self.read_lines(path), 1) if line.strip()
        )

    # -- what several verbs share ------------------------------------------------------
    def answered(self, f, operation, numbered, action: str, done: str = "", label: str = ""):
        """(batch, ``operation``'s answers) per batch of ``numbered`` (line number or None,
        item) pairs, with a progress line when ``label``; an item the handle refuses fails
        naming its line (or "argument"), ``done`` after the reason."""
        for chunk in batches(self.stderr if label else None, label, numbered):
            try:
                yield chunk, operation([raw for _, raw in chunk])
            except (ValueError, TypeError):
                for lineno, raw in chunk:  # which one (the error path only)
                    try:
                        f.validate_items([raw])
                    except (ValueError, TypeError) as exc:
                        where = f"line {lineno}" if lineno else "argument"
                        raise fail(f"{where}: cannot {action} {raw!r}: {exc}.{done}") from None
                raise

    def item_values(self, f, items, file, action: str, done: str) -> tuple[int, Iterator[str]]:
        """The arguments, then ``--file``'s lines, every one validated (the handle's normaliser
        + encode) before the first write: a bad one writes nothing. Returns how many, and
        an iterator reading them again: the lines go to a temporary file as they are
        validated, so memory stays bounded whatever the input's size."""
        spool = tempfile.TemporaryFile("w+", encoding="utf-8")
        total = 0
        numbered = chain(((None, item) for item in items), self.item_lines(file) if file else ())
        for chunk, _ in self.answered(
            f, f.validate_items, numbered, action, f" Nothing was {done}."
        ):
            total += len(chunk)
            spool.write("".join(f"{raw}\n" for lineno, raw in chunk if lineno))  # one write
        spool.seek(0)
        return total, chain(items, (line[:-1] for line in spool))

    def in_batches(self, operation, values: Iterator[str], total: int, label: str) -> int:
        """``operation`` (add_many, remove_many) over ``values`` in batches, with a
        progress line; how many answers were True."""
        return sum(
            operation(batch, count=True) for batch in batches(self.stderr, label, values, total)
        )

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
        """With no ``--member``, the row's handle: a family's (the whole family: ``stats``,
        ``clear``) or a filter's; with one, the member's (``member_filter``)."""
        from django_bloom.services import get_handle

        if member is not None:
            return self.member_filter(name, member)
        return get_handle(name, refresh=True)

    @staticmethod
    def label(name: str, member: str | None) -> str:
        return repr(name) if member is None else f"{name!r} member {member!r}"
