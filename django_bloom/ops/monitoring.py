"""Fill history, health and projections of filters, for the admin and cron.

``record_snapshot`` stores one point (``manage.py bloom stats --record`` runs
it from cron). ``row_stats`` keeps each filter's (and family's) stats for a few
seconds so a changelist of many big filters stays fast (stats already count bits
in chunked BITCOUNT ranges, never blocking Redis for long). ``chart_svg`` draws
the history as inline SVG: no JavaScript, nothing fetched from a CDN.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from django.utils import timezone
from django.utils.html import escape
from django.utils.translation import gettext as _

from django_bloom.exceptions import FilterNotFound, FilterUnavailable
from django_bloom.expiring import MISSING, Expiring
from django_bloom.family import FamilyStats
from django_bloom.models import BloomFilter, FilterSnapshot
from django_bloom.ops import formatting
from django_bloom.registry import layout_for

if TYPE_CHECKING:
    from django_bloom.services import Filter, FilterStats

STATS_TTL_SECONDS = 15.0
UNAVAILABLE_TTL_SECONDS = 5.0
FILLING_AT = 0.8  # capacity used from which a filter is "filling"

OK, FILLING, OVER, UNAVAILABLE = "ok", "filling", "over capacity", "unavailable"


def record_snapshot(handle: Filter, stats: FilterStats | None = None) -> FilterSnapshot:
    """Store one point of ``handle``'s history from ``Filter.stats()``.

    Raises ``FilterUnavailable`` (and writes nothing) when the filter cannot be read.
    Pass ``stats`` when they were just computed, to avoid a second BITCOUNT.
    """
    stats = stats if stats is not None else handle.stats()
    estimated = stats.estimated_items
    _cache_put(handle.identity, stats)
    return FilterSnapshot.objects.create(
        bloom_filter=handle.meta,
        bits_set=stats.bits_set,
        # A completely full bitmap estimates infinity; store the bit count as a floor.
        estimated_items=estimated if estimated != float("inf") else float(stats.num_bits),
        fill_ratio=stats.fill_ratio,
        current_fpr=stats.current_fpr,
        items_added=stats.items_added,
        memory_bytes=stats.memory_bytes,
    )


# -- cached stats ---------------------------------------------------------------
# One per-process cache for every page, scrape and health check: a filter's
# FilterStats keyed by its handle's identity, a family's FamilyStats by its row.
_stats = Expiring()


def _cache_put(key: tuple, stats: Any, ttl: float = STATS_TTL_SECONDS) -> None:
    _stats.put(key, stats, time.monotonic() + ttl)


def _cached(key: tuple, read: Callable[[], Any], refresh: bool) -> Any | None:
    """``read()``, at most ``STATS_TTL_SECONDS`` old; None when unavailable."""
    if not refresh:
        hit = _stats.get(key, time.monotonic())
        if hit is not MISSING:
            return hit  # stats, or None: unavailable a moment ago
    try:
        stats = read()
    except (FilterUnavailable, FilterNotFound):
        # Remembered briefly too: a list page asks once per column, and a stalled
        # Redis must cost one timeout per filter, not one per column.
        _cache_put(key, None, UNAVAILABLE_TTL_SECONDS)
        return None
    _cache_put(key, stats)
    return stats


def cached_stats(handle: Filter, refresh: bool = False) -> FilterStats | None:
    """Stats of the filter, at most ``STATS_TTL_SECONDS`` old; None when unavailable."""
    return _cached(handle.identity, handle.stats, refresh)


def filter_handle(meta: BloomFilter) -> Filter | None:
    """The row's handle (a fresh one when the row was resized since it was cached);
    None when the row is gone or is a filter family (``row_stats`` reads those)."""
    from django_bloom import services

    if meta.family:
        return None
    try:
        handle = services.get_filter(meta.name)
        if handle.identity[0] != layout_for(meta).segment.keys.bits:  # resized since cached
            handle = services.get_filter(meta.name, refresh=True)
    except FilterNotFound:  # deleted meanwhile
        return None
    return handle


def row_stats(meta: BloomFilter, refresh: bool = False) -> FilterStats | FamilyStats | None:
    """The cached stats of a filter row (a family's: its ``FamilyStats``, from a bounded
    SCAN and sampled MEMORY USAGE), at most ``STATS_TTL_SECONDS`` old; None when the
    row cannot be read. What the admin's list and detail pages, Prometheus and the
    health check show."""
    from django_bloom import services

    if meta.family:
        key = ("family", meta.pk, meta.name)
        return _cached(key, lambda: services.get_handle(meta.name).stats(), refresh)
    handle = filter_handle(meta)
    return cached_stats(handle, refresh) if handle is not None else None


def forget_stats() -> None:
    """Drop every cached figure (filters' and families')."""
    _stats.clear()


# -- health and projection ------------------------------------------------------
def health(stats: FilterStats | FamilyStats | None) -> str:
    """The one health of a row's stats (``row_stats``), for the admin's list and detail
    page, ``bloom stats``, ``filter_report``'s states and the W003 check: unavailable
    without stats (a family: without its control key); otherwise the ``fill_level`` of
    the capacity used (a family: its fullest sampled member's; ok without members)."""
    if stats is None or (isinstance(stats, FamilyStats) and not stats.control_present):
        return UNAVAILABLE
    return OK if stats.capacity_used is None else fill_level(stats.capacity_used)


def fill_level(capacity_used: float) -> str:
    """ok, filling (from ``FILLING_AT``) or over capacity (past 1.0): a filter's, a bar's."""
    if capacity_used > 1.0:
        return OVER
    if capacity_used >= FILLING_AT:
        return FILLING
    return OK


@dataclass(frozen=True)
class Projection:
    items_per_day: float
    full_at: datetime | None  # None: not growing, or already over capacity
    over: bool = False  # already at or over capacity: no date to project

    @property
    def per_day_text(self) -> str:
        return formatting.number(self.items_per_day)

    @property
    def full_at_text(self) -> str:
        return formatting.moment(self.full_at)


def projection(snapshots: Sequence[FilterSnapshot], capacity: int) -> Projection | None:
    """Least-squares line of estimated items over time, and when it meets capacity."""
    points = [(s.recorded_at.timestamp(), s.estimated_items) for s in snapshots]
    if len(points) < 2:
        return None
    n = len(points)
    mean_t = sum(t for t, _ in points) / n
    mean_y = sum(y for _, y in points) / n
    var_t = sum((t - mean_t) ** 2 for t, _ in points)
    if var_t == 0:
        return None
    slope = sum((t - mean_t) * (y - mean_y) for t, y in points) / var_t  # items per second
    per_day = slope * 86400
    last_t, last_y = points[-1][0], mean_y + slope * (points[-1][0] - mean_t)
    if points[-1][1] >= capacity or last_y >= capacity:
        return Projection(per_day, None, over=True)  # "will reach" would name a past moment
    if slope <= 0:
        return Projection(per_day, None)
    seconds = (capacity - last_y) / slope
    when = datetime.fromtimestamp(last_t, tz=timezone.get_current_timezone()) + timedelta(
        seconds=seconds
    )
    return Projection(per_day, when)


# -- chart ------------------------------------------------------------------------
def nice_ticks(top: float, count: int = 5) -> list[float]:
    """0, step, 2*step... up to the first tick at or above ``top``; step 1, 2, 2.5 or 5 x 10^k."""
    raw = max(top, 1.0) / count
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 2.5, 5, 10) if m * power >= raw)
    ticks = [0.0]
    while ticks[-1] < top:
        ticks.append(ticks[-1] + step)
    return ticks


def chart_svg(
    snapshots: Sequence[FilterSnapshot], capacity: int, width: int = 960, height: int = 240
) -> str:
    """Estimated items over time against capacity, as a self-contained SVG string.

    Empty without history (the page says so once). It scales to the panel's
    width; colours come from the admin's CSS variables (light and dark themes).
    """
    pts = sorted(snapshots, key=lambda s: s.recorded_at)
    if not pts:
        return ""
    pad_l, pad_r, pad_t, pad_b = 64, 16, 16, 36
    w, h = width - pad_l - pad_r, height - pad_t - pad_b
    t0, t1 = pts[0].recorded_at.timestamp(), pts[-1].recorded_at.timestamp()
    span = max(t1 - t0, 1.0)
    ticks = nice_ticks(max(capacity * 1.1, max(p.estimated_items for p in pts) * 1.05))
    y_max = ticks[-1]

    def x(t: float) -> float:
        return pad_l + (t - t0) / span * w if len(pts) > 1 else pad_l + w / 2

    def y(v: float) -> float:
        return pad_t + h - (min(max(v, 0.0), y_max) / y_max) * h

    line = " ".join(f"{x(p.recorded_at.timestamp()):.1f},{y(p.estimated_items):.1f}" for p in pts)
    # One precision for the whole chart: neighbours taken in the same minute read apart.
    when = formatting.distinct_moments([p.recorded_at for p in pts])
    dots = "".join(
        f'<circle class="bloom-point" cx="{x(p.recorded_at.timestamp()):.1f}" '
        f'cy="{y(p.estimated_items):.1f}" r="3" fill="#2f6fb3"><title>'
        + escape(
            _("%(when)s: %(items)s items (%(fill)s of bits set)")
            % {
                "when": label,
                "items": formatting.number(p.estimated_items),
                "fill": formatting.percent(p.fill_ratio),
            }
        )
        + "</title></circle>"
        for p, label in zip(pts, when, strict=True)
    )
    grid = "".join(
        f'<text class="bloom-tick" x="{pad_l - 6}" y="{y(v) + 4:.1f}" text-anchor="end">'
        f"{escape(short_number(v))}</text>"
        f'<line class="bloom-grid" x1="{pad_l}" x2="{pad_l + w}" y1="{y(v):.1f}" y2="{y(v):.1f}" '
        'stroke="#e3e7ec"/>'
        for v in ticks
    )
    cap_y = y(capacity)
    label_y = cap_y - 7 if cap_y - 7 > pad_t + 10 else cap_y + 15
    capacity_label = escape(_("capacity %(n)s") % {"n": formatting.number(capacity)})
    aria = escape(
        _("Estimated items over time, capacity %(n)s") % {"n": formatting.number(capacity)}
    )
    first, last = escape(when[0]), escape(when[-1])
    return (
        f'<svg class="bloom-chart" role="img" viewBox="0 0 {width} {height}" '
        f'preserveAspectRatio="xMinYMin meet" aria-label="{aria}" '
        'xmlns="http://www.w3.org/2000/svg" font-family="system-ui, sans-serif" font-size="11">'
        f"{grid}"
        f'<line class="bloom-capacity" x1="{pad_l}" x2="{pad_l + w}" '
        f'y1="{cap_y:.1f}" y2="{cap_y:.1f}" stroke="#b3261e" stroke-dasharray="6 4"/>'
        f'<text class="bloom-capacity-label" x="{pad_l + 6}" y="{label_y:.1f}" fill="#b3261e">'
        f"{capacity_label}</text>"
        f'<polyline class="bloom-series" fill="none" stroke="#2f6fb3" stroke-width="2" '
        f'points="{line}"/>{dots}'
        f'<text class="bloom-time" x="{pad_l}" y="{height - 10}">{first}</text>'
        f'<text class="bloom-time" x="{pad_l + w}" y="{height - 10}" text-anchor="end">'
        f"{last}</text>"
        "</svg>"
    )


def short_number(value: float) -> str:
    """A tick label that keeps the tick's exact value: 1.25k, 2.5M, 750."""
    if math.isnan(value):
        return "?"
    for suffix, unit in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if value >= unit:
            text = f"{value / unit:.2f}".rstrip("0").rstrip(".")
            return f"{text}{suffix}"
    return formatting.number(value)
