"""monitoring: snapshots from real stats, the stats cache, health, chart."""

from datetime import datetime, timedelta, timezone
from types import SimpleNamespace

import pytest

import django_bloom
from django_bloom import monitoring
from django_bloom.exceptions import FilterUnavailable
from django_bloom.models import FilterSnapshot

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def fresh_stats():
    monitoring.forget_stats()
    yield
    monitoring.forget_stats()


def test_record_snapshot_stores_the_filter_stats():
    f = django_bloom.create_filter("snap", capacity=1000, error_rate=0.01)
    f.add_many([f"item-{i}" for i in range(300)])
    snap = monitoring.record_snapshot(f)
    stats = f.stats()
    assert FilterSnapshot.objects.filter(bloom_filter=f.meta).count() == 1
    assert snap.bits_set == stats.bits_set > 0
    assert snap.estimated_items == pytest.approx(300, rel=0.1)
    assert snap.fill_ratio == pytest.approx(stats.fill_ratio)
    assert snap.memory_bytes == stats.memory_bytes


def test_record_snapshot_writes_nothing_when_the_key_is_lost(redis_client):
    f = django_bloom.create_filter("lost-snap", capacity=1000)
    f.add("a")
    redis_client.delete(f.layout.keys.bits)
    with pytest.raises(FilterUnavailable):
        monitoring.record_snapshot(f)
    assert not FilterSnapshot.objects.exists()


def test_cached_stats_are_reused_until_refreshed(redis_client):
    f = django_bloom.create_filter("cached", capacity=1000)
    f.add_many(["a", "b"])
    first = monitoring.cached_stats(f)
    f.add_many([f"x{i}" for i in range(100)])
    assert monitoring.cached_stats(f).bits_set == first.bits_set  # served from cache
    fresh = monitoring.cached_stats(f, refresh=True)
    assert fresh.bits_set > first.bits_set
    redis_client.delete(f.layout.keys.bits)
    assert monitoring.cached_stats(f, refresh=True) is None  # unavailable, not "empty"


@pytest.mark.parametrize(
    ("used", "state"),
    [(0.0, "ok"), (0.79, "ok"), (0.8, "filling"), (1.0, "filling"), (1.01, "over capacity")],
)
def test_health_thresholds(used, state):
    assert monitoring.health(SimpleNamespace(capacity_used=used)) == state


def test_health_without_stats_is_unavailable():
    assert monitoring.health(None) == "unavailable"


def _snap(t, items):
    return SimpleNamespace(recorded_at=t, estimated_items=items, fill_ratio=items / 10_000)


def test_projection_uses_a_least_squares_line():
    t0 = datetime(2026, 1, 1, tzinfo=timezone.utc)
    # Noisy but steadily growing by 1,000/day: the fit, not the last two points, decides.
    pts = [_snap(t0 + timedelta(days=d), 1000 * d + (50 if d % 2 else -50)) for d in range(6)]
    p = monitoring.projection(pts, capacity=10_000)
    assert p.items_per_day == pytest.approx(1000, rel=0.05)
    assert t0 + timedelta(days=9) < p.full_at < t0 + timedelta(days=11)
    shrinking = monitoring.projection([_snap(t0, 500), _snap(t0 + timedelta(days=1), 400)], 10)
    assert shrinking.full_at is None and shrinking.items_per_day < 0
    same_time = monitoring.projection([_snap(t0, 1), _snap(t0, 2)], 10)
    assert same_time is None


def test_chart_svg_has_one_point_per_snapshot_and_the_capacity_line():
    t0 = datetime(2026, 1, 1, tzinfo=timezone.utc)
    pts = [_snap(t0 + timedelta(hours=h), 100 * h) for h in range(5)]
    svg = monitoring.chart_svg(pts, capacity=1000)
    assert svg.startswith("<svg") and svg.endswith("</svg>")
    assert svg.count('class="bloom-point"') == 5
    assert 'class="bloom-capacity"' in svg and "capacity 1,000" in svg
    assert "<script" not in svg and "http://" not in svg.replace("http://www.w3.org/2000/svg", "")


def test_chart_svg_without_history_says_so():
    svg = monitoring.chart_svg([], capacity=1000)
    assert "No history yet" in svg and "bloom-point" not in svg
