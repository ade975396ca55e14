"""Metrics endpoints for tests/ops/test_prometheus.py (imports prometheus_client): a plain
registry served by metrics_view, and the default REGISTRY served by django-prometheus's
own view when it is installed (as its /metrics does)."""

from django.urls import path
from prometheus_client import CollectorRegistry

from django_bloom.contrib import prometheus

PLAIN = CollectorRegistry()
prometheus.register(PLAIN)

urlpatterns = [path("metrics/", prometheus.metrics_view, {"registry": PLAIN})]

try:
    from django_prometheus.exports import ExportToDjangoView
except ImportError:  # not a dependency: tests/ops/test_prometheus.py says it skipped
    pass
else:
    urlpatterns.append(path("django-prometheus/metrics", ExportToDjangoView))
