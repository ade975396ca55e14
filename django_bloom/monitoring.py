"""Fill history, health and projections of filters, for the admin and cron.

``record_snapshot`` stores one point (``manage.py bloom stats --record`` runs
it from cron). ``cached_stats`` keeps each filter's stats for a few seconds so
a changelist of many big filters stays fast (stats already count bits in
chunked BITCOUNT ranges, never blocking Redis for long). ``chart_svg`` draws
the history as inline SVG: no JavaScript, nothing fetched from a CDN.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.utils import timezone
from django.utils.html import escape

from django_bloom.exceptions import FilterUnavailable
from django_bloom.models import FilterSnapshot

STATS_TTL_SECONDS = 15.0
FILLING_AT = 0.8  # capacity used from which a filter is "filling"

OK, FILLING, OVER, UNAVAILABLE = "ok", "filling", "over capacity", "unavailable"


def record_snapshot(handle: Any, stats: Any = None) -> FilterSnapshot:
    """Store one point of ``handle``'s history from ``Filter.stats()``.

    Raises ``FilterUnavailable`` (and writes nothing) when the filter cannot be read.
    Pass ``stats`` when they were just computed, to avoid a second BITCOUNT.
    """
    stats = stats if stats is not None else handle.stats()
    estimated = stats.estimated_items
    _cache_put(handle, stats)
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
_stats: dict[tuple[str, str], tuple[float, Any]] = {}
_lock = threading.Lock()


def _cache_key(handle: Any) -> tuple[str, str]:
    return (handle.layout.keys.bits, handle.storage.alias)


def _cache_put(handle: Any, stats: Any) -> None:
    with _lock:
        _stats[_cache_key(handle)] = (time.monotonic() + STATS_TTL_SECONDS, stats)


def cached_stats(handle: Any, refresh: bool = False) -> Any | None:
    """Stats of the filter, at most ``STATS_TTL_SECONDS`` old; None when unavailable."""
    key = _cache_key(handle)
    if not refresh:
        with _lock:
            hit = _stats.get(key)
        if hit and hit[0] > time.monotonic():
            return hit[1]
    try:
        stats = handle.stats()
    except FilterUnavailable:
        return None
    _cache_put(handle, stats)
    return stats


def forget_stats() -> None:
    with _lock:
        _stats.clear()


# -- health and projection ------------------------------------------------------
def health(stats: Any | None) -> str:
    if stats is None:
        return UNAVAILABLE
    if stats.capacity_used > 1.0:
        return OVER
    if stats.capacity_used >= FILLING_AT:
        return FILLING
    return OK


@dataclass(frozen=True)
class Projection:
    items_per_day: float
    full_at: datetime | None  # None: not growing (or not enough history)


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
    if slope <= 0:
        return Projection(per_day, None)
    last_t, last_y = points[-1][0], mean_y + slope * (points[-1][0] - mean_t)
    seconds = (capacity - last_y) / slope
    when = datetime.fromtimestamp(last_t, tz=timezone.get_current_timezone()) + timedelta(
        seconds=max(0.0, seconds)
    )
    return Projection(per_day, when)


# -- chart ------------------------------------------------------------------------
def chart_svg(
    snapshots: Sequence[FilterSnapshot], capacity: int, width: int = 640, height: int = 220
) -> str:
    """Estimated items over time against capacity, as a self-contained SVG string."""
    pts = sorted(snapshots, key=lambda s: s.recorded_at)
    pad_l, pad_r, pad_t, pad_b = 64, 16, 16, 36
    w, h = width - pad_l - pad_r, height - pad_t - pad_b
    if not pts:
        return (
            f'<svg class="bloom-chart" role="img" width="{width}" height="60" '
            'aria-label="No history yet"><text x="8" y="30">No history yet: record snapshots '
            "with <tspan font-family='monospace'>manage.py bloom stats --record</tspan>."
            "</text></svg>"
        )
    t0, t1 = pts[0].recorded_at.timestamp(), pts[-1].recorded_at.timestamp()
    span = max(t1 - t0, 1.0)
    y_max = max(capacity * 1.1, max(p.estimated_items for p in pts) * 1.05, 1.0)

    def x(t: float) -> float:
        return pad_l + (t - t0) / span * w if len(pts) > 1 else pad_l + w / 2

    def y(v: float) -> float:
        return pad_t + h - (min(v, y_max) / y_max) * h

    line = " ".join(f"{x(p.recorded_at.timestamp()):.1f},{y(p.estimated_items):.1f}" for p in pts)
    dots = "".join(
        f'<circle class="bloom-point" cx="{x(p.recorded_at.timestamp()):.1f}" '
        f'cy="{y(p.estimated_items):.1f}" r="3">'
        f"<title>{escape(p.recorded_at.strftime('%Y-%m-%d %H:%M'))}: "
        f"{p.estimated_items:,.0f} items ({p.fill_ratio:.1%} of bits set)</title></circle>"
        for p in pts
    )
    cap_y = y(capacity)
    ticks = "".join(
        f'<text x="{pad_l - 6}" y="{y(v) + 4:.1f}" text-anchor="end" font-size="11">'
        f"{_short(v)}</text>"
        f'<line x1="{pad_l}" x2="{pad_l + w}" y1="{y(v):.1f}" y2="{y(v):.1f}" stroke="#e3e7ec"/>'
        for v in (0, y_max / 2, y_max)
    )
    first = escape(pts[0].recorded_at.strftime("%Y-%m-%d %H:%M"))
    last = escape(pts[-1].recorded_at.strftime("%Y-%m-%d %H:%M"))
    return (
        f'<svg class="bloom-chart" role="img" viewBox="0 0 {width} {height}" width="{width}" '
        f'height="{height}" aria-label="Estimated items over time, capacity {capacity:,}" '
        'xmlns="http://www.w3.org/2000/svg" font-family="system-ui, sans-serif">'
        f"{ticks}"
        f'<line class="bloom-capacity" x1="{pad_l}" x2="{pad_l + w}" '
        f'y1="{cap_y:.1f}" y2="{cap_y:.1f}" '
        'stroke="#b3261e" stroke-dasharray="6 4"/>'
        f'<text x="{pad_l + w}" y="{cap_y - 5:.1f}" text-anchor="end" font-size="11" '
        'fill="#b3261e">'
        f"capacity {capacity:,}</text>"
        f'<polyline fill="none" stroke="#2f6fb3" stroke-width="2" points="{line}"/>{dots}'
        f'<text x="{pad_l}" y="{height - 10}" font-size="11">{first}</text>'
        f'<text x="{pad_l + w}" y="{height - 10}" font-size="11" text-anchor="end">{last}</text>'
        "</svg>"
    )


def _short(value: float) -> str:
    if value >= 1e9:
        return f"{value / 1e9:.1f}G"
    if value >= 1e6:
        return f"{value / 1e6:.1f}M"
    if value >= 1e3:
        return f"{value / 1e3:.0f}k"
    return f"{value:.0f}" if not math.isnan(value) else "?"
