"""monitoring: snapshots from real stats, the stats cache, health, chart."""

from datetime import datetime, timedelta, timezone
from types import SimpleNamespace

import pytest

import django_bloom
from django_bloom.exceptions import FilterUnavailable
from django_bloom.models import FilterSnapshot
from django_bloom.ops import monitoring

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
    redis_client.delete(f.layout.segment.keys.bits)
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
    redis_client.delete(f.layout.segment.keys.bits)
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


def test_chart_svg_without_history_is_empty_the_page_says_it_once():
    assert monitoring.chart_svg([], capacity=1000) == ""


def tick_labels(svg):
    import re

    return [
        (float(y), label)
        for y, label in re.findall(r'class="bloom-tick" x="[\d.]+" y="([\d.]+)"[^>]*>([^<]+)<', svg)
    ]


def test_chart_ticks_say_the_value_where_they_sit():
    t0 = datetime(2026, 1, 1, tzinfo=timezone.utc)
    pts = [_snap(t0, 200), _snap(t0 + timedelta(hours=1), 1200)]  # top of data ~1,261
    svg = monitoring.chart_svg(pts, capacity=1000)
    labels = tick_labels(svg)
    assert [label for _, label in labels] == ["0", "500", "1k", "1.5k"]
    # evenly spaced: each label sits where its value is
    ys = [y for y, _ in labels]
    gaps = [a - b for a, b in zip(ys, ys[1:], strict=False)]
    assert max(gaps) - min(gaps) < 0.5
    assert monitoring.nice_ticks(1_100_000)[-1] == 1_250_000
    assert monitoring.short_number(2_500_000) == "2.5M"


def test_chart_capacity_label_clears_its_line_and_the_chart_scales():
    import re

    t0 = datetime(2026, 1, 1, tzinfo=timezone.utc)
    svg = monitoring.chart_svg([_snap(t0, 10), _snap(t0 + timedelta(days=1), 500)], 1000)
    line_y = float(re.search(r'class="bloom-capacity" [^>]*y1="([\d.]+)"', svg)[1])
    label_y = float(re.search(r'class="bloom-capacity-label" [^>]*y="([\d.]+)"', svg)[1])
    assert line_y - label_y >= 6  # baseline above the line, clear of it
    assert 'width="' not in svg.split(">", 1)[0]  # no fixed pixel width: CSS sizes it


def test_projection_of_an_over_capacity_filter_names_no_past_date():
    t0 = datetime(2026, 1, 1, tzinfo=timezone.utc)
    p = monitoring.projection([_snap(t0, 900), _snap(t0 + timedelta(days=1), 1300)], 1000)
    assert p.over and p.full_at is None


def test_chart_times_are_in_the_sites_time_zone(settings):
    from django.utils import translation

    settings.TIME_ZONE = "Asia/Shanghai"  # UTC+8
    t0 = datetime(2026, 1, 1, 1, 30, tzinfo=timezone.utc)
    with translation.override("en"):
        svg = monitoring.chart_svg([_snap(t0, 10), _snap(t0 + timedelta(days=1), 20)], 1000)
    assert "9:30" in svg and "1:30" not in svg


def test_an_unavailable_filter_is_asked_once_per_moment_not_once_per_column(redis_client):
    from django_bloom import services
    from django_bloom.models import BloomFilter

    f = django_bloom.create_filter("down-stats", capacity=1000)
    BloomFilter.objects.filter(pk=f.meta.pk).update(cache_alias="dead")
    services.forget_filters()
    dead = django_bloom.get_filter("down-stats")
    asked = []
    real = dead.stats
    dead.stats = lambda: asked.append(1) or real()
    assert [monitoring.cached_stats(dead) for _ in range(4)] == [None] * 4
    assert len(asked) == 1  # the list's columns share one failed attempt
    assert monitoring.cached_stats(dead, refresh=True) is None and len(asked) == 2
