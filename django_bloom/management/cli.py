"""What ``manage.py bloom`` needs besides its verbs: argument types, how a verb declares
its parser (``verb``), options several verbs take, progress lines, the confirmation prompt
and the checks of ``create`` arguments. What the verbs print (tables, JSON): ``output.py``.
No verb logic here."""

from __future__ import annotations

import argparse
import json
import math
import re
import time
from collections.abc import Callable, Iterable
from datetime import datetime, timedelta
from itertools import islice
from typing import Any

from django.core.management.base import CommandError, OutputWrapper
from django.utils import timezone
from django.utils.dateparse import parse_date, parse_datetime

from django_bloom.normalizers import get_normalizer

EXIT_ABSENT = 1
EXIT_ERROR = 2
BATCH = 10_000  # items per round trip of add, remove and measure
KINDS = ("generic", "unique", "blocklist")


def fail(message: str) -> CommandError:
    return CommandError(message, returncode=EXIT_ERROR)


# -- argparse types -----------------------------------------------------------
def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def error_rate(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number like 0.01, got {text!r}") from None
    if not 0 < value < 1 or math.isnan(value):
        raise argparse.ArgumentTypeError(f"must lie strictly between 0 and 1, got {text}")
    return value


# The units of a duration (``--expires``, ``--member-ttl``, and ``bloom stats`` writing a TTL).
UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_EXPIRES_IN = re.compile(r"^\s*([+-]?\d+)\s*([smhdw])\s*$", re.IGNORECASE)
_TTL = re.compile(r"^\s*(\d+)\s*([smhdw]?)\s*$", re.IGNORECASE)


def iso_moment(text: str, expected: str = "a date (2030-01-31) or a datetime") -> datetime:
    """An ISO date (its midnight) or datetime, naive ones in the current time zone: a past
    one too (``blocklist --unused-since``; ``expiry`` reads durations as well)."""
    try:
        moment = parse_datetime(text.strip())
        if moment is None:
            day = parse_date(text.strip())
            moment = datetime(day.year, day.month, day.day) if day else None
    except ValueError:  # well formed, but no such day: 2030-02-31
        moment = None
    if moment is None:
        raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}")
    return timezone.make_aware(moment) if timezone.is_naive(moment) else moment


def expiry(text: str, now: datetime | None = None) -> datetime:
    """A future moment: a duration (``90m``, ``12h``, ``7d``, ``2w``) or an ISO date/datetime."""
    now = now or timezone.now()
    match = _EXPIRES_IN.match(text)
    if match:
        moment = now + timedelta(seconds=int(match[1]) * UNIT_SECONDS[match[2].lower()])
    else:
        moment = iso_moment(
            text,
            "a date (2030-01-31), a datetime (2030-01-31T12:00) or a duration (90m, 12h, 7d, 2w)",
        )
    if moment <= now:
        raise argparse.ArgumentTypeError(
            f"expiry {text!r} is in the past: give a future date or a duration like 7d"
        )
    return moment


def duration_seconds(text: str) -> int:
    """``--member-ttl``: seconds, or a duration like ``90m``, ``12h``, ``30d``, ``2w``."""
    match = _TTL.match(text)
    if not match:
        raise argparse.ArgumentTypeError(
            f"expected seconds or a duration (90m, 12h, 30d, 2w), got {text!r}"
        )
    seconds = int(match[1]) * UNIT_SECONDS[match[2].lower() or "s"]  # no unit: seconds
    if seconds < 1:
        raise argparse.ArgumentTypeError("must be at least 1 second")
    return seconds


def glue_option_values(args: list[str], options: tuple[str, ...]) -> list[str]:
    """``--expires -1d`` -> ``--expires=-1d``: argparse would read ``-1d`` as an option
    and answer "expected one argument"; glued, the value reaches its type's own check."""
    out: list[str] = []
    values = iter(args)
    for arg in values:
        if arg in options:
            value = next(values, None)
            if value is not None and value.startswith("-") and value != "-":
                out.append(f"{arg}={value}")
                continue
            out.append(arg)
            if value is not None:
                out.append(value)
            continue
        out.append(arg)
    return out


# -- progress -------------------------------------------------------------------
class Progress:
    """A one-line progress bar on stderr, redrawn in place with ``\\r``.

    Silent unless the stream is a terminal, so cron mail and CI logs stay clean.
    Redraws at most ten times a second.
    """

    WIDTH = 28

    def __init__(self, stream: OutputWrapper | None, label: str, total: int | None = None):
        self.stream, self.label, self.total = stream, label, total
        self.enabled = stream is not None and stream.isatty()
        self._drawn_at = 0.0

    def update(self, done: int, total: int | None = None, force: bool = False) -> None:
        """Also the ``progress`` callback of rebuilds: ``(done)`` or ``(done, total)``."""
        if total:
            self.total = total
        if not self.enabled:
            return
        now = time.monotonic()
        if not force and now - self._drawn_at < 0.1:
            return
        self._drawn_at = now
        if self.total:
            share = min(1.0, done / self.total)
            filled = round(share * self.WIDTH)
            bar = "#" * filled + "." * (self.WIDTH - filled)
            line = f"\r{self.label} [{bar}] {done:,}/{self.total:,} {share:6.1%}"
        else:
            line = f"\r{self.label} {done:,}"
        self.stream.write(line, ending="")
        self.stream.flush()

    def finish(self, done: int) -> None:
        if self.enabled:
            self.update(done, force=True)
            self.stream.write("")


def batches(stream: OutputWrapper | None, label: str, items: Iterable, total: int | None = None):
    """Lists of BATCH of ``items``, read as they are needed, with a progress line
    (``label``, on ``stream`` when one is given) that shows each batch done, out of
    ``total`` when it is known: the one loop of add, remove, check and measure."""
    progress = Progress(stream, label, total)
    done, items = 0, iter(items)
    while batch := list(islice(items, BATCH)):
        yield batch
        done += len(batch)
        progress.update(done)
    progress.finish(done)


def layout_options(pairs: list[str] | None) -> dict[str, Any]:
    """``--option KEY=VALUE`` (repeatable): values read as JSON numbers/booleans when they
    parse, else kept as text; the layout's ``validate_options`` checks them."""
    options: dict[str, Any] = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise fail(f"--option must look like KEY=VALUE, got {pair!r}")
        try:
            options[key] = json.loads(value)
        except (ValueError, RecursionError):  # text (or too long or deep: refused by create)
            options[key] = value
    return options


def validate_source(source: str) -> None:
    """``app_label.Model.field`` must name an existing model field."""
    from django.apps import apps
    from django.core.exceptions import FieldDoesNotExist

    parts = source.split(".")
    if len(parts) != 3 or not all(parts):
        raise fail(f"--source must look like app_label.Model.field, got {source!r}")
    try:
        model = apps.get_model(parts[0], parts[1])
        model._meta.get_field(parts[2])
    except LookupError as exc:
        raise fail(f"--source {source!r}: {exc}") from None
    except FieldDoesNotExist:
        model_name = f"{parts[0]}.{parts[1]}"
        raise fail(f"--source {source!r}: {model_name} has no field {parts[2]!r}") from None


def validate_normalizer(normalizer: str) -> None:
    try:
        get_normalizer(normalizer)
    except ValueError as exc:
        raise fail(f"--normalizer: {exc}") from None


# -- a verb's parser, declared on its handler ----------------------------------------
def verb(help: str, *arguments: Callable[[Any], Any], description: str | None = None):
    """Declares the method below, ``cmd_<verb>`` (``_`` for ``-``), the handler of ``bloom
    <verb>``, and that verb's parser: its ``help`` line, ``description`` and ``arguments``,
    each called with the parser in turn (``arg(...)`` or the option helpers below).
    ``add_verb_parsers`` builds the parsers."""

    def declare(handler: Callable) -> Callable:
        handler.parser_spec = (help, description, arguments)
        return handler

    return declare


def arg(*names: str, **kwargs: Any) -> Callable[[Any], Any]:
    """One ``add_argument`` of a verb's parser (``verb``), as the option helpers below are."""
    return lambda parser: parser.add_argument(*names, **kwargs)


def verb_handler(command: Any, name: str) -> Callable:
    """``bloom <name>``'s handler: the command's method ``cmd_<name>`` (``_`` for ``-``)."""
    return getattr(command, "cmd_" + name.replace("-", "_"))


def add_verb_parsers(subparsers: Any, command: Any, verbs: tuple[str, ...]) -> None:
    """A parser for each of ``verbs``, in that order, as its handler declares it (``verb``)."""
    for name in verbs:
        help, description, arguments = verb_handler(command, name).parser_spec
        parser = subparsers.add_parser(name, help=help, description=description)
        for add in arguments:
            add(parser)


# -- options more than one verb takes -------------------------------------------------
def add_items_arguments(parser: Any) -> None:
    """``add`` and ``remove``: the items as arguments, or ``--file`` (``-``: stdin)."""
    parser.add_argument("items", nargs="*")
    parser.add_argument("--file", default=None, help="one item per line; '-' reads stdin")


def require_items(items: list[str], file: str | None, action: str) -> None:
    """What ``add_items_arguments`` gave must name some item (checked before any lookup)."""
    if not items and file is None:
        raise fail(f"nothing to {action}: give items as arguments or --file PATH ('-' for stdin)")


def add_member_option(parser: Any) -> None:
    parser.add_argument(
        "--member",
        default=None,
        help="the member of a filter family (e.g. a user id); required for families",
    )


def add_json_option(parser: Any) -> None:
    parser.add_argument("--json", action="store_true", dest="as_json", help="JSON output")


def add_noinput_option(parser: Any) -> None:
    """Django's ``--noinput``/``--no-input``: do not ask (cron, CI, nobody to answer)."""
    parser.add_argument(
        "--noinput",
        "--no-input",
        action="store_false",
        dest="interactive",
        help="do not ask for confirmation (needed where nobody can answer: cron, CI)",
    )


def confirm(
    question: str,
    cancelled: str,
    unanswered: str | None = None,
    accepts: Callable[[str], bool] = lambda answer: answer == "yes",
) -> None:
    """Ask ``question`` (``delete``, ``clear``); go on only if the stripped answer
    ``accepts``. Any other answer raises ``cancelled`` with exit 1; a run nobody can
    answer (stdin closed or unreadable: cron, CI) never goes on: ``unanswered`` (by
    default ``cancelled``), exit 1."""
    try:
        answer = input(question)
    except (EOFError, OSError):
        raise CommandError(unanswered or cancelled, returncode=EXIT_ABSENT) from None
    if not accepts(answer.strip()):
        raise CommandError(cancelled, returncode=EXIT_ABSENT)


def no_source(name: str, resize: dict) -> str:
    """Why ``bloom rebuild NAME`` cannot run on a filter fed by the application, and what
    to do instead (to resize it, above all: nothing holds its items but the filter)."""
    if not resize:
        return (
            f"filter {name!r} has no bound source (app_label.Model.field) to rebuild from; "
            "a bound filter is created with one: manage.py bloom create ... --source"
        )
    return (
        f"filter {name!r} has no bound source, so it cannot be rebuilt at another size: its "
        "items are kept nowhere else (a Bloom filter cannot list them). Instead: create a new "
        "filter of the size you need (manage.py bloom create NEW --capacity N), add the items "
        f"to it again from where they come from, then delete this one (manage.py bloom delete "
        f"{name}); or, in code, Filter.rebuild(items, capacity=N) with the items. A filter "
        "that must keep growing: create it with --layout scalable."
    )
