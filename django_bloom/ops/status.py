"""Every filter's state at a bounded cost: what metrics scrapers and health checks read.

``filter_report()`` reads the filter rows (one query), then asks each cache alias
ONE pipeline (one per Redis node on a cluster): are the filters' keys there, is a
rebuild lock held, what do the validator counters say. Fill figures come from the
admin's cached stats (``monitoring.row_stats``: at most ``STATS_TTL_SECONDS`` old),
asked only of filters whose keys are there.

Aliases are probed in parallel, each through its circuit breaker: a stopped Redis
answers "refused" at once, a frozen one costs the first report one
``SOCKET_TIMEOUT`` (0.2 s) and later ones nothing while the breaker is open. Its
filters are then reported ``unavailable``; nothing raises.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from django_bloom import counters
from django_bloom.engine.kinds.family import layout as family_keys
from django_bloom.engine.storage import Storage
from django_bloom.engine.transport import breaker
from django_bloom.engine.transport.breaker import guarded
from django_bloom.exceptions import BloomError
from django_bloom.models import BloomFilter
from django_bloom.ops import monitoring
from django_bloom.registry import layout_for

OK, FILLING, FULL, STALE, KEY_MISSING, UNAVAILABLE = (
    "ok", "filling", "full", "stale", "key_missing", "unavailable",
)  # fmt: skip
STATES = (OK, FILLING, FULL, STALE, KEY_MISSING, UNAVAILABLE)
REBUILD_STATES = ("never", "running", "done", "failed", "interrupted")
MAX_PROBE_THREADS = 8


@dataclass
class FilterStatus:
    """One filter row (a family counts as one): its state and what is known of it."""

    meta: BloomFilter
    state: str
    stats: Any = None  # FilterStats, FamilyStats, or None when unreadable
    counters: dict[str, int] = field(default_factory=dict)  # validator outcomes, stored
    rebuild: str = "never"  # one of REBUILD_STATES

    @property
    def name(self) -> str:
        return self.meta.name

    @property
    def alias(self) -> str:
        return self.meta.cache_alias

    @property
    def layout(self) -> str:
        return "family" if self.meta.family else self.meta.layout


@dataclass
class AliasStatus:
    alias: str
    up: bool
    error: str = ""


@dataclass
class Report:
    filters: list[FilterStatus]
    aliases: dict[str, AliasStatus]
    breakers: list[dict[str, Any]]  # breaker.states() after the probes (this process)


def filter_report() -> Report:
    """Every filter's state (see the module docstring for the cost)."""
    rows = list(BloomFilter.objects.order_by("name"))
    by_alias: dict[str, list[BloomFilter]] = {}
    for meta in rows:
        by_alias.setdefault(meta.cache_alias, []).append(meta)
    probed = _probe_all(by_alias)
    filters = []
    for meta in rows:
        alias, found = probed[meta.cache_alias]
        filters.append(_status(meta, alias.up, found.get(meta.name)))
    return Report(
        filters=filters,
        aliases={alias: status for alias, (status, _found) in probed.items()},
        breakers=breaker.states(),
    )


# -- one pipeline per alias (per node) ---------------------------------------------
@dataclass
class _Found:
    missing: list[str]
    locked: bool
    counters: dict[str, int]


def _keys(meta: BloomFilter) -> tuple[list[str], str, str]:
    """(keys that must exist, rebuild lock key, counters key) of a row."""
    layout = layout_for(meta)
    if meta.family:  # members come and go; the control key is the family's own
        anchors = [family_keys.control_key(layout.segment.prefix, meta.name)]
    else:
        anchors = [segment.keys.bits for segment in layout.segments]
        control = getattr(layout, "control_key", None)  # a scalable filter's control hash
        if isinstance(control, str):
            anchors.append(control)
    keys = layout.control.keys
    return anchors, keys.lock, keys.counters


class _Probe:
    """``guarded`` wants an object with the alias's breaker and its probe (PING)."""

    def __init__(self, storage: Storage):
        self.storage, self.breaker, self.ping = storage, storage.breaker, storage.ping

    @guarded
    def run(self, rows: list[BloomFilter]) -> dict[str, _Found]:
        groups: dict[int, tuple[Any, list[tuple[str, str, str]]]] = {}
        conn = self.storage.conn
        with self.storage._mapped():
            for meta in rows:
                anchors, lock, counts = _keys(meta)
                ops = [*(("exists", k) for k in anchors), ("lock", lock), ("counters", counts)]
                for op, key in ops:
                    client = conn.client_for(key)
                    groups.setdefault(id(client), (client, []))[1].append((meta.name, op, key))
            found = {meta.name: _Found([], False, {}) for meta in rows}
            for client, commands in groups.values():
                with client.pipeline(transaction=False) as pipe:
                    for _name, op, key in commands:
                        pipe.hgetall(key) if op == "counters" else pipe.exists(key)
                    replies = pipe.execute()
                for (name, op, key), reply in zip(commands, replies, strict=True):
                    if op == "exists" and not reply:
                        found[name].missing.append(key)
                    elif op == "lock":
                        found[name].locked = bool(reply)
                    elif op == "counters":
                        found[name].counters = counters.outcomes(reply)
        return found


def _probe_alias(alias: str, rows: list[BloomFilter]) -> tuple[AliasStatus, dict[str, _Found]]:
    try:
        return AliasStatus(alias, True), _Probe(Storage(alias)).run(rows)
    except BloomError as exc:  # unreachable, refused, or not a Redis cache at all
        return AliasStatus(alias, False, str(exc)), {}
    except Exception as exc:  # noqa: BLE001 - a report must not fail (e.g. an unknown alias)
        return AliasStatus(alias, False, f"{type(exc).__name__}: {exc}"), {}


def _probe_all(
    by_alias: dict[str, list[BloomFilter]],
) -> dict[str, tuple[AliasStatus, dict[str, _Found]]]:
    """Each alias's probe; in parallel when there are several (each waits at most its
    own timeout, so a frozen Redis does not add up with another)."""
    if len(by_alias) <= 1:
        return {alias: _probe_alias(alias, rows) for alias, rows in by_alias.items()}
    workers = min(len(by_alias), MAX_PROBE_THREADS)
    with ThreadPoolExecutor(workers, thread_name_prefix="bloom-status") as pool:
        futures = {
            alias: pool.submit(_probe_alias, alias, rows) for alias, rows in by_alias.items()
        }
        return {alias: future.result() for alias, future in futures.items()}


# -- one row's state ---------------------------------------------------------------
def _status(meta: BloomFilter, up: bool, found: _Found | None) -> FilterStatus:
    rebuild = _rebuild_state(meta, found.locked if found else None)
    if not up or found is None:
        return FilterStatus(meta, UNAVAILABLE, rebuild=rebuild)
    status = FilterStatus(meta, OK, counters=found.counters, rebuild=rebuild)
    if found.missing:
        status.state = KEY_MISSING
        return status
    status.stats = monitoring.row_stats(meta)
    if meta.is_stale:
        status.state = STALE
    elif status.stats is None:
        status.state = UNAVAILABLE
    else:  # a family's: its fullest sampled member's (its control key was just found)
        health = monitoring.health(status.stats)
        status.state = {monitoring.OVER: FULL, monitoring.FILLING: FILLING}.get(health, OK)
    return status


def _rebuild_state(meta: BloomFilter, locked: bool | None) -> str:
    """``running`` while the rebuild lock is held; a row left "running" without the
    lock (its process died) is ``interrupted``; otherwise the row's last outcome."""
    if locked:
        return "running"
    row = meta.rebuild_state or "never"
    if row == BloomFilter.RebuildState.RUNNING and locked is False:
        return "interrupted"
    return row if row in REBUILD_STATES else "never"
