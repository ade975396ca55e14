"""A Prometheus collector of every filter's figures (``pip install django-bloom[prometheus]``).

With django-prometheus (its ``/metrics`` serves the default registry), register it
once, e.g. in one of your AppConfig's ``ready()``::

    from django_bloom.contrib import prometheus
    prometheus.register()

With a registry of your own, serve it with ``metrics_view``::

    registry = CollectorRegistry()
    prometheus.register(registry)
    urlpatterns += [path("metrics/", prometheus.metrics_view, {"registry": registry})]

A scrape reads ``ops.status.filter_report()``: one query, one pipeline per cache
alias, fill figures from the admin's cached stats (at most 15 s old). A stopped
or frozen Redis does not stall it: its filters read ``state="unavailable"``.
Metric names and an alert rule: docs/integrations.md.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from typing import Any

from django.http import HttpRequest, HttpResponse
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from django_bloom.counters import OUTCOMES
from django_bloom.ops import status as bloom_status

logger = logging.getLogger("django_bloom.prometheus")

LABELS = ["filter", "layout", "alias"]
BREAKER_STATES = ("closed", "open", "half-open")

# name -> (help, extra labels); every filter series also has LABELS.
FILTER_GAUGES = {
    "capacity": "Items the filter is sized for (per member for a family; a scalable "
    "filter's live capacity).",
    "estimated_items": "Items in the filter, estimated from its fill (+Inf: all bits set).",
    "capacity_used_ratio": "Estimated items / capacity (above 1: over capacity); a family: "
    "its fullest sampled member's (of up to 32 sampled).",
    "fill_ratio": "Fraction of bits (counters) set (a family: its fullest sampled member's).",
    "false_positive_ratio": "False-positive rate now (a family: its fullest sampled member's).",
    "target_false_positive_ratio": "False-positive rate the filter was sized for.",
    "memory_bytes": "Redis memory of the filter's keys (a family: estimated from a sample).",
    "items_added": "Items add() reported new (the application's count).",
    "family_members": "Members of a filter family that have a key.",
    "last_rebuild_timestamp_seconds": "Unix time of the filter's last completed rebuild.",
}


# key -> (type, name, help, labels): the series beside FILTER_GAUGES.
OTHER_METRICS = {
    "state": (
        GaugeMetricFamily,
        "django_bloom_filter_state",
        "1 for the filter's state (ok, filling, full, stale, key_missing, unavailable), "
        "0 for the others.",
        [*LABELS, "state"],
    ),
    "rebuild": (
        GaugeMetricFamily,
        "django_bloom_filter_rebuild_state",
        "1 for the filter's rebuild state (never, running, done, failed, interrupted).",
        [*LABELS, "state"],
    ),
    "outcomes": (
        CounterMetricFamily,
        "django_bloom_validator_outcomes",
        "Unique-validator decisions: db_skipped (no query), db_confirmed, false_positives, "
        "unavailable (the database decided). Flushed by each process every few seconds.",
        [*LABELS, "outcome"],
    ),
    "redis_up": (
        GaugeMetricFamily,
        "django_bloom_redis_up",
        "1 if the cache alias's Redis answered this scrape.",
        ["alias"],
    ),
    "breaker": (
        GaugeMetricFamily,
        "django_bloom_breaker_state",
        "1 for the alias's circuit breaker state in this process (closed, open, half-open).",
        ["alias", "state"],
    ),
    "breaker_failures": (
        GaugeMetricFamily,
        "django_bloom_breaker_failures",
        "Consecutive Redis connection failures counted by the alias's breaker (this process).",
        ["alias"],
    ),
}


class BloomCollector:
    """Yields django-bloom's metric families at each scrape (``collect``)."""

    def describe(self) -> list[Metric]:
        """The families without samples: registering never queries anything."""
        return list(_families(None).values())

    def collect(self) -> Iterator[Metric]:
        start = time.perf_counter()
        try:
            report = bloom_status.filter_report()
        except Exception:  # noqa: BLE001 - one broken collector must not fail the whole scrape
            logger.exception("django-bloom metrics: the filter report failed")
            report = None
        families = _families(report)
        error = GaugeMetricFamily(
            "django_bloom_scrape_error", "1 if the last django-bloom collection failed."
        )
        error.add_metric([], 0 if report is not None else 1)
        duration = GaugeMetricFamily(
            "django_bloom_scrape_duration_seconds", "Time the django-bloom collection took."
        )
        duration.add_metric([], time.perf_counter() - start)
        yield from families.values()
        yield error
        yield duration


def _families(report: bloom_status.Report | None) -> dict[str, Metric]:
    out: dict[str, Metric] = {
        name: GaugeMetricFamily(f"django_bloom_filter_{name}", doc, labels=LABELS)
        for name, doc in FILTER_GAUGES.items()
    }
    for key, (kind, name, doc, labels) in OTHER_METRICS.items():
        out[key] = kind(name, doc, labels=labels)
    if report is not None:
        for status in report.filters:
            _add_filter(out, status)
        _add_aliases(out, report)
    return out


def _add_filter(out: dict[str, Metric], status: bloom_status.FilterStatus) -> None:
    labels = [status.name, status.layout, status.alias]
    meta, stats = status.meta, status.stats

    def gauge(name: str, value: Any) -> None:
        if value is not None:
            out[name].add_metric(labels, float(value))

    gauge("capacity", getattr(stats, "capacity", None) or meta.capacity)
    gauge("target_false_positive_ratio", meta.error_rate)
    if meta.last_rebuild_at is not None:
        gauge("last_rebuild_timestamp_seconds", meta.last_rebuild_at.timestamp())
    if stats is not None:
        gauge("memory_bytes", stats.memory_bytes)
        gauge("items_added", stats.items_added)
        if meta.family:
            gauge("family_members", stats.members)
        else:
            gauge("estimated_items", stats.estimated_items)
        gauge("capacity_used_ratio", stats.capacity_used)  # a family: fullest sampled member
        gauge("fill_ratio", stats.fill_ratio)
        gauge("false_positive_ratio", stats.current_fpr)
    for state in bloom_status.STATES:
        out["state"].add_metric([*labels, state], 1.0 if state == status.state else 0.0)
    for state in bloom_status.REBUILD_STATES:
        out["rebuild"].add_metric([*labels, state], 1.0 if state == status.rebuild else 0.0)
    if status.counters:
        for outcome in OUTCOMES:
            out["outcomes"].add_metric([*labels, outcome], float(status.counters[outcome]))


def _add_aliases(out: dict[str, Metric], report: bloom_status.Report) -> None:
    for alias, probed in sorted(report.aliases.items()):
        out["redis_up"].add_metric([alias], 1.0 if probed.up else 0.0)
    breakers = {state["alias"]: state for state in report.breakers}
    for alias in sorted(set(report.aliases) | set(breakers)):
        found = breakers.get(alias, {"state": "closed", "failures": 0})
        for state in BREAKER_STATES:
            out["breaker"].add_metric([alias, state], 1.0 if found["state"] == state else 0.0)
        out["breaker_failures"].add_metric([alias], float(found["failures"]))


# -- registering and serving -------------------------------------------------------
_registered: dict[int, BloomCollector] = {}
_lock = threading.Lock()


def register(registry: Any = None) -> BloomCollector:
    """Register the collector in ``registry`` (default: prometheus_client's REGISTRY,
    the one django-prometheus serves); registering twice is harmless."""
    registry = REGISTRY if registry is None else registry
    with _lock:
        collector = _registered.get(id(registry))
        if collector is None:
            collector = _registered[id(registry)] = BloomCollector()
            registry.register(collector)
    return collector


def unregister(registry: Any = None) -> None:
    registry = REGISTRY if registry is None else registry
    with _lock:
        collector = _registered.pop(id(registry), None)
        if collector is not None:
            registry.unregister(collector)


def metrics_view(request: HttpRequest, registry: Any = None) -> HttpResponse:
    """The registry (default REGISTRY) in Prometheus's text format."""
    registry = REGISTRY if registry is None else registry
    return HttpResponse(generate_latest(registry), content_type=CONTENT_TYPE_LATEST)
