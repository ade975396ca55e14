"""A WARNING when adds take a filter past its capacity: one per filter and process every
``WARN_EVERY_SECONDS``, naming the filter, its capacity, the estimated items, the
false-positive rate that many items give, and the remedy.

The estimate costs no round trip and no query: ``items_added`` as Redis answered this
process's last counters flush (every process's counts, ``counters.py``) plus what this
process counted since. It lags other processes' adds by at most a flush, and an item
reported "already present" (a false positive) is not counted: the warning can come late,
not early. Only kinds a rebuild resizes (``Rebuildable``) are watched, since that is the
remedy: not scalable (grows), rotating (forgets), family members (``items_added`` counts
the whole family) or counting filters (removals do not lower ``items_added``; ``bloom
stats`` and the W003 check read their fill instead).
"""

from __future__ import annotations

import logging
import math
from typing import Any

from django_bloom.conf import forget_on_change
from django_bloom.engine.kinds.capabilities import Rebuildable, Removable
from django_bloom.expiring import Expiring

logger = logging.getLogger("django_bloom.capacity")

WARN_EVERY_SECONDS = 3600.0
_warned = Expiring()  # (row id, name) -> when the filter was last warned about (``claim``)


def watches(layout: Any, member: Any) -> bool:
    """Whether adds through this layout are watched (see the module's docstring)."""
    return (
        member is None
        and isinstance(layout, Rebuildable)
        and not isinstance(layout, Removable)
    )


def expected_rate(meta: Any, items: float) -> float:
    """The false-positive rate ``items`` distinct items give the row's geometry, by its
    kind's formula (``Layout.expected_fpr``)."""
    return meta.layout_class().expected_fpr(meta.num_bits, items, meta.num_hashes)


def past_capacity(meta: Any, estimated: int) -> None:
    """A write took the estimated items past ``meta.capacity``: warn, at most once per
    filter and process every ``WARN_EVERY_SECONDS``. Never raises."""
    if not _warned.claim((meta.pk, meta.name), WARN_EVERY_SECONDS):
        return
    try:
        _warn(meta, estimated)
    except Exception:  # noqa: BLE001 - a warning must never fail an add
        logger.exception("could not describe filter %r past its capacity", meta.name)


def _warn(meta: Any, estimated: int) -> None:
    rate = expected_rate(meta, estimated)
    suggested = _round_up(2 * estimated)
    how = (
        f"manage.py bloom rebuild {meta.name} --capacity {suggested}"
        if meta.is_bound
        else f"Filter.rebuild(items, capacity={suggested}) with its items"
    )
    logger.warning(
        "Bloom filter %r is past its capacity: about %s items added, capacity %s; its "
        "false-positive rate is now about %s (target %s) and climbs with every add. "
        "Rebuild it with a larger capacity (%s), or create it with layout 'scalable', "
        "which grows. (Once per %d s per process.)",
        meta.name,
        f"{estimated:,}",
        f"{meta.capacity:,}",
        _rate(rate),
        _rate(meta.error_rate),
        how,
        WARN_EVERY_SECONDS,
    )


def _rate(rate: float) -> str:
    if rate <= 0:
        return "0"
    return f"{rate:.2%} (1 in {1 / rate:,.0f})" if rate < 1 else "100%"


def _round_up(n: int) -> int:
    """``n`` rounded up to two significant digits (2,345 -> 2,400)."""
    if n < 100:
        return max(n, 1)
    step = 10 ** (int(math.log10(n)) - 1)
    return -(-n // step) * step


@forget_on_change
def forget() -> None:
    """Forget which filters were warned about (tests: on every ``DJANGO_BLOOM`` change,
    ``conf.forget_on_change``)."""
    _warned.clear()
