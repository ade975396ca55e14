"""Numbers and moments as a site owner reads them, for the admin and the commands.

Digits are grouped in the active language, "-0" never shows, false-positive
rates are said as "1 in N", and every moment goes through Django's
``localtime`` (the site's ``TIME_ZONE``) and date formats.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from datetime import datetime, timedelta
from itertools import pairwise

from django.utils import formats, timezone
from django.utils.timesince import timesince
from django.utils.translation import gettext as _

DASH = "—"
INFINITE = "∞"


def plain(value: float) -> float:
    """``value`` with a negative zero turned into 0.0 (an empty filter estimates -0.0)."""
    return value + 0.0 if isinstance(value, float) else value


def number(value: float | int | None, decimals: int = 0) -> str:
    """Grouped digits in the active language: ``1,261`` (``-0`` reads ``0``)."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return DASH
    if isinstance(value, float) and math.isinf(value):
        return INFINITE
    value = plain(round(float(value), decimals))
    if decimals == 0:
        value = int(value)
    # The language's own grouping: 1,000,000 in English, 1000000 in zh-hans (its convention).
    return formats.number_format(value, decimal_pos=decimals or None, force_grouping=True)


def percent(fraction: float | None, decimals: int = 1) -> str:
    """``85.1%``; no figure (a dash) and "∞" as ``number`` says them, without the sign."""
    text = number(None if fraction is None else fraction * 100, decimals)
    return text if text in (DASH, INFINITE) else text + "%"


def _round_significant(value: float, digits: int = 2) -> int:
    if value < 10:
        return round(value)
    scale = 10 ** (int(math.floor(math.log10(value))) - digits + 1)
    return int(round(value / scale) * scale)


def one_in(rate: float) -> str:
    """A target rate as written: ``1 in 10,000`` (no rounding beyond whole numbers)."""
    if rate <= 0:
        return _("never")
    return _("1 in %(n)s") % {"n": number(max(1, round(1 / rate)))}


def fpr_words(rate: float | None) -> str:
    """An estimated rate in words: ``about 1 in 4,000``; tiny ones ``under 1 in a billion``."""
    if rate is None or math.isnan(rate):
        return DASH
    if rate <= 0:
        return _("none (empty filter)")
    if rate >= 1:
        return _("every check (filter full)")
    n = 1 / rate
    if n >= 1e9:
        return _("under 1 in a billion")
    return _("about 1 in %(n)s") % {"n": number(_round_significant(n))}


def human_bytes(size: int | None) -> str:
    if size is None:
        return DASH
    value = float(size)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{number(value)} {unit}" if unit == "B" else f"{number(value, 1)} {unit}"
        value /= 1024
    return f"{size} B"  # pragma: no cover


def moment(value: datetime | None) -> str:
    """A moment in the site's time zone, in the format the admin uses for its own dates."""
    if value is None:
        return DASH
    return formats.date_format(timezone.localtime(value), "DATETIME_FORMAT")


PRECISIONS = ("minute", "second", "millisecond")


def moment_format(precision: str = "minute") -> str:
    """The active language's ``DATETIME_FORMAT`` with its time spelt out to ``precision``:
    'P' ("7 p.m.", "noon") becomes 'g:i a', and seconds follow the minutes where asked."""
    out, escaped = [], False
    for char in formats.get_format("DATETIME_FORMAT"):
        if escaped:
            out.append(char)
            escaped = False
        elif char == "\\":
            out.append(char)
            escaped = True
        elif char == "P":
            out.append("g:i:s a" if precision != "minute" else "g:i a")
        elif char == "i" and precision != "minute":
            out.append("i:s")
        else:
            out.append(char)
    fmt = "".join(out)
    if precision != "minute" and "s" not in fmt.replace("\\s", ""):
        fmt += " H:i:s"  # a format without minutes: the time, plainly
    if precision == "millisecond":
        fmt = fmt.replace("i:s", "i:s.u", 1)
    return fmt


def moment_at(value: datetime, precision: str = "minute") -> str:
    """``moment`` to a given precision (``moment_format``); milliseconds, not micro."""
    text = formats.date_format(timezone.localtime(value), moment_format(precision))
    return re.sub(r"(:\d\d\.\d{3})\d{3}", r"\1", text) if precision == "millisecond" else text


def distinct_moments(values: Sequence[datetime]) -> list[str]:
    """Labels for moments in order, one precision for all: the coarsest (minute, second,
    millisecond) at which no two neighbours read the same."""
    labels: list[str] = []
    for precision in PRECISIONS:
        labels = [moment_at(value, precision) for value in values]
        if all(a != b for a, b in pairwise(labels)):
            break
    return labels


def ago(value: datetime) -> str:
    """``3 hours ago``: short enough for a list column (the exact moment goes in a tooltip)."""
    if timezone.now() - value < timedelta(minutes=1):
        return _("just now")
    return _("%(time)s ago") % {"time": timesince(value, depth=1)}
