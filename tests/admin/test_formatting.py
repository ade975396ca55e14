"""Numbers and moments as the admin and the commands show them."""

from datetime import datetime, timedelta
from datetime import timezone as dt_timezone

import pytest
from django.utils import timezone, translation

from django_bloom.ops import formatting


@pytest.fixture(autouse=True)
def english():
    with translation.override("en"):
        yield


def test_numbers_are_grouped_and_never_minus_zero():
    assert formatting.number(1261.4) == "1,261"
    assert formatting.number(-0.0) == "0"
    assert formatting.number(-0.0001, 1) == "0.0"
    assert formatting.percent(-0.0) == "0.0%"
    assert formatting.percent(0.8512, 0) == "85%"
    assert formatting.number(float("inf")) == "∞"
    assert formatting.number(None) == formatting.DASH


@pytest.mark.parametrize(
    "rate, words",
    [
        (0.0, "none (empty filter)"),
        (1 / 4123, "about 1 in 4,100"),
        (0.01, "about 1 in 100"),
        (7.83e-72, "under 1 in a billion"),
        (1.0, "every check (filter full)"),
    ],
)
def test_fpr_in_words(rate, words):
    assert formatting.fpr_words(rate) == words


def test_targets_are_exact():
    assert formatting.one_in(1e-4) == "1 in 10,000"
    assert formatting.one_in(0.003) == "1 in 333"


@pytest.mark.parametrize(
    "size, text",
    [(512, "512 B"), (131_160 * 1024 // 1024, "128.1 KiB"), (2_621_528, "2.5 MiB"), (None, "—")],
)
def test_human_bytes(size, text):
    assert formatting.human_bytes(size) == text


def test_moments_are_local(settings):
    settings.TIME_ZONE = "Asia/Shanghai"
    moment = datetime(2026, 1, 1, 23, 30, tzinfo=dt_timezone.utc)
    assert formatting.moment(moment) == "Jan. 2, 2026, 7:30 a.m."
    assert formatting.ago(timezone.now() - timedelta(hours=3, minutes=5)) == "3\xa0hours ago"
    assert formatting.ago(timezone.now()) == "just now"
