"""How long a scalable filter can grow (``engine/kinds/scalable/layout.py``).

Sub-filter i holds ``capacity * growth**i`` items at ``error_rate * (1 - r) * r**i``
(r: ``tightening``). A filter has at most ``MAX_SUB_FILTERS``, each one Redis string;
every one it may grow to must also be sizeable (a rate of at least
``sizing.MIN_ERROR_RATE``): ``create_filter`` refuses settings whose later sub-filters
could not be sized, rather than let an add fail once the filter grows there.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from django_bloom.engine import sizing
from django_bloom.engine.format import TRAILER_BYTES

MAX_SUB_FILTERS = 64
MAX_SUB_BYTES = 512 * 1024 * 1024  # one Redis string (proto-max-bulk-len default)


def lifetime(capacity: int, error_rate: float, growth: int, tightening: float) -> tuple[int, str]:
    """(how many sub-filters a filter of these settings can have, what stops it there):
    "max" (``MAX_SUB_FILTERS``), "string" (the next exceeds one Redis string), "capacity"
    (the next's capacity exceeds ``MAX_CAPACITY``) or "rate" (the next's error rate is
    below ``MIN_ERROR_RATE``: it cannot be sized; ``ScalableLayout.geometry`` refuses that)."""
    for i in range(MAX_SUB_FILTERS):
        sub_capacity = capacity * growth**i
        if sub_capacity > sizing.MAX_CAPACITY:
            return i, "capacity"
        rate = error_rate * (1 - tightening) * tightening**i
        if rate > 0:
            bits = math.ceil(-sub_capacity * math.log(rate) / (sizing.LN2 * sizing.LN2))
            if (bits + 7) // 8 + TRAILER_BYTES > MAX_SUB_BYTES:
                return i, "string"
        if rate < sizing.MIN_ERROR_RATE:
            return i, "rate"
    return MAX_SUB_FILTERS, "max"


def _tightening_bounds(capacity: int, error_rate: float, growth: int) -> tuple[float, float] | None:
    """The widest run of tightenings (in steps of 0.001) whose filter lives to its end
    without an unsizeable sub-filter; None if none does."""
    runs: list[list[float]] = []
    for step in range(1, 1000):
        if lifetime(capacity, error_rate, growth, step / 1000)[1] == "rate":
            runs.append([])
        elif runs and runs[-1]:
            runs[-1].append(step / 1000)
        else:
            runs.append([step / 1000])
    best = max(runs, key=len, default=[])
    return (best[0], best[-1]) if best else None


def unsizeable(capacity: int, error_rate: float, growth: int, tightening: float, i: int) -> str:
    rate = error_rate * (1 - tightening) * tightening**i
    text = (
        f"scalable 'tightening' {tightening:g} leaves sub-filter {i} an error rate of "
        f"{rate:.3g} (error_rate x (1 - tightening) x tightening**{i}), below the smallest "
        f"that can be sized ({sizing.MIN_ERROR_RATE:g}); a scalable filter may grow to "
        f"{MAX_SUB_FILTERS} sub-filters. "
    )
    bounds = _tightening_bounds(capacity, error_rate, growth)
    if bounds is None:
        return text + f"No tightening fits error_rate {error_rate:g}: use a larger error_rate"
    return text + (
        f"With capacity {capacity}, error_rate {error_rate:g} and growth {growth}, "
        f"'tightening' must be at least {bounds[0]:g} and at most {bounds[1]:g}"
    )


def full_message(name: str, sub_capacity: Callable[[int], int], life: int, end: str) -> str:
    """``FilterFull``'s text for a filter that has its ``life`` sub-filters (``lifetime``)."""
    why = {
        "max": f"{MAX_SUB_FILTERS} sub-filters, the most a scalable filter has",
        "string": f"sub-filter {life} would exceed one Redis string (512 MiB)",
        "capacity": f"sub-filter {life}'s capacity would exceed 2**63-1",
        "rate": f"sub-filter {life}'s error rate could not be sized (below "
        f"{sizing.MIN_ERROR_RATE:g}: its tightening was stored before create checked it)",
    }[end]
    held = sum(sub_capacity(i) for i in range(life))
    return f"scalable filter {name!r} is full: its {life} sub-filters hold {held:,} items ({why})"
