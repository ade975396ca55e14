"""A family's fill (issue 30): its fullest sampled member's fill, false-positive rate and
capacity used, in ``stats()``, the health rule, the admin and Prometheus, on the real Redis."""

import pytest

import django_bloom
from django_bloom import services
from django_bloom.ops import monitoring
from tests.conftest import handshake

pytestmark = pytest.mark.django_db


@pytest.fixture
def fresh_stats():
    monitoring.forget_stats()
    yield
    monitoring.forget_stats()


@pytest.fixture
def filling(fresh_stats):
    """A family of 100 items per member: member 1 holds 90 (past the 80 % threshold),
    member 2 holds 5, member 3 holds 40."""
    family = django_bloom.create_filter("pushed", capacity=100, error_rate=0.01, family=True)
    for member, count in ((1, 90), (2, 5), (3, 40)):
        django_bloom.get_filter("pushed", member=member).add_many(
            [f"article-{member}-{i}" for i in range(count)]
        )
    return family


def test_stats_show_the_fullest_sampled_member(filling):
    stats = services.get_family("pushed").stats()
    fullest = django_bloom.get_filter("pushed", member=1).stats()
    assert stats.memory_sampled == 3
    assert stats.capacity_used == pytest.approx(fullest.capacity_used)
    assert 0.8 < stats.capacity_used < 1.1
    assert stats.fill_ratio == pytest.approx(fullest.fill_ratio)
    assert stats.current_fpr == pytest.approx(fullest.current_fpr)
    assert stats.current_fpr > 0.001  # member 2 (5 items): about 1e-12
    assert stats.as_dict()["capacity_used"] == stats.capacity_used
    assert monitoring.health(stats) == monitoring.FILLING


def test_an_empty_family_has_no_fill_and_is_ok(fresh_stats):
    django_bloom.create_filter("pushed", capacity=100, family=True)
    stats = services.get_family("pushed").stats()
    assert stats.capacity_used is None and stats.fill_ratio is None and stats.current_fpr is None
    assert monitoring.health(stats) == monitoring.OK


def test_an_over_capacity_member_makes_the_family_over(fresh_stats):
    django_bloom.create_filter("pushed", capacity=100, family=True)
    django_bloom.get_filter("pushed", member=1).add_many([f"a{i}" for i in range(300)])
    django_bloom.get_filter("pushed", member=2).add("b")
    stats = services.get_family("pushed").stats()
    assert stats.capacity_used > 1.0
    assert monitoring.health(stats) == monitoring.OVER


def test_the_fill_comes_in_the_sampling_round_trip(filling, sent_commands):
    family = services.get_family("pushed")
    family.stats()  # warm-up: connections
    sent_commands.clear()
    family.stats()
    sent = [payload for payload in sent_commands if not handshake(payload)]
    counters = [payload for payload in sent if b"HGETALL" in payload]  # items_added
    sampling = [payload for payload in sent if b"SCAN" not in payload and payload not in counters]
    assert len(counters) == 1 and len(sampling) == 1, sent  # one pipeline, as before
    assert sampling[0].count(b"MEMORY") == 3 and sampling[0].count(b"BITCOUNT") == 3
    assert b"EXISTS" in sampling[0]  # the control key: in the same round trip now


def test_the_admin_shows_the_fill_of_a_filling_family(admin_client, filling):
    from django.urls import reverse

    url = reverse("admin:django_bloom_bloomfilter_change", args=[filling.meta.pk])
    html = admin_client.get(url).content.decode()
    assert 'id="bloom-family"' in html
    panel = html[html.index('id="bloom-family"') :]
    assert "▲ filling" in panel
    assert "of its capacity" in panel and "the fullest of 3 sampled members" in panel
    changelist = admin_client.get(reverse("admin:django_bloom_bloomfilter_changelist"))
    row = changelist.content.decode()
    row = row[row.index(">pushed<") :]
    row = row[: row.index("</tr>")]
    assert "▲ filling" in row  # the health column: the fullest sampled member's


def test_bloom_stats_shows_the_fullest_sampled_members_fill(filling):
    import io
    import json

    from django.core.management import call_command

    out = io.StringIO()
    call_command("bloom", "stats", "pushed", "--json", stdout=out)
    [entry] = json.loads(out.getvalue())
    assert 0.8 < entry["capacity_used"] < 1.1 and entry["current_fpr"] > 0.001
    out = io.StringIO()
    call_command("bloom", "stats", "pushed", stdout=out)
    [row] = [line for line in out.getvalue().splitlines() if line.startswith("pushed ")]
    assert f"{entry['capacity_used']:.1%}" in row and f"{entry['fill_ratio']:.1%}" in row
