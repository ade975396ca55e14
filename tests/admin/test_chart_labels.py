"""The trend chart labels neighbouring points apart (issue 24, item 8): snapshots taken
in the same minute no longer read the same."""

import re
from datetime import datetime, timedelta
from datetime import timezone as dt_timezone

import pytest
from django.urls import reverse
from django.utils import translation

import django_bloom
from django_bloom.models import FilterSnapshot
from django_bloom.ops import formatting, monitoring

T0 = datetime(2026, 3, 4, 5, 6, 7, 250_000, tzinfo=dt_timezone.utc)


def snap(when, items=10):
    s = FilterSnapshot(bits_set=1, estimated_items=items, fill_ratio=0.1, current_fpr=0.001)
    s.recorded_at = when
    return s


def titles(svg):
    return re.findall(r"<title>([^:<]+:[^<]*?): [\d,]+ items", svg)


def times(svg):
    return re.findall(r'class="bloom-time"[^>]*>([^<]+)<', svg)


@pytest.fixture(autouse=True)
def english_utc(settings):
    settings.TIME_ZONE = "UTC"
    with translation.override("en"):
        yield


def test_snapshots_in_one_minute_read_apart():
    svg = monitoring.chart_svg([snap(T0), snap(T0 + timedelta(seconds=20))], capacity=100)
    first, last = times(svg)
    assert first != last  # was "March 4, 2026, 5:06 a.m." twice
    assert first == "March 4, 2026, 5:06:07 a.m." and last == "March 4, 2026, 5:06:27 a.m."
    assert len(set(titles(svg))) == 2


def test_snapshots_in_one_second_read_apart_to_the_millisecond():
    pts = [snap(T0), snap(T0 + timedelta(milliseconds=300)), snap(T0 + timedelta(minutes=5))]
    labels = formatting.distinct_moments([p.recorded_at for p in pts])
    assert labels[0] == "March 4, 2026, 5:06:07.250 a.m."
    assert labels[1] == "March 4, 2026, 5:06:07.550 a.m."
    assert len(set(labels)) == 3


def test_points_minutes_apart_keep_the_admins_minute_labels():
    labels = formatting.distinct_moments([T0, T0 + timedelta(hours=1), T0 + timedelta(days=1)])
    assert labels == [
        "March 4, 2026, 5:06 a.m.",
        "March 4, 2026, 6:06 a.m.",
        "March 5, 2026, 5:06 a.m.",
    ]
    # on the hour: the minutes are spelt out, never "5 a.m." or "noon" beside "5:06 a.m."
    noon = datetime(2026, 3, 4, 12, 0, tzinfo=dt_timezone.utc)
    assert formatting.moment_at(noon) == "March 4, 2026, 12:00 p.m."


def test_other_languages_keep_their_own_format():
    with translation.override("zh-hans"):
        labels = formatting.distinct_moments([T0, T0 + timedelta(seconds=1)])
    assert labels == ["2026年3月4日 05:06:07", "2026年3月4日 05:06:08"]


@pytest.mark.django_db
def test_the_filter_page_and_the_snapshot_list_tell_same_minute_snapshots_apart(admin_client):
    monitoring.forget_stats()
    f = django_bloom.create_filter("trend", capacity=100, error_rate=0.01)
    for seconds in (1, 31):
        FilterSnapshot.objects.create(
            bloom_filter=f.meta,
            recorded_at=T0 + timedelta(seconds=seconds),
            bits_set=1,
            estimated_items=seconds,
            fill_ratio=0.1,
            current_fpr=0.001,
        )
    page = admin_client.get(
        reverse("admin:django_bloom_bloomfilter_change", args=[f.meta.pk])
    ).content.decode()
    chart = page[page.index('<svg class="bloom-chart"') :]
    first, last = times(chart)
    assert first != last and len(set(titles(chart))) == 2
    listing = admin_client.get(reverse("admin:django_bloom_filtersnapshot_changelist"))
    cells = re.findall(r'<td class="field-recorded_display">([^<]+)</td>', listing.content.decode())
    assert sorted(cells) == [first, last]  # the list reads as the chart does
