"""The local mirror: zero round trips, refreshes on change, bounded, never a lost key."""

import time

import pytest
from django.test import override_settings

import django_bloom
from django_bloom.engine import mirror
from django_bloom.exceptions import FilterKeyMissing
from tests.engine.test_mirror_tracking import registered

pytestmark = pytest.mark.django_db


@pytest.fixture
def mirrored(bloom_prefix):
    def settings(**extra):
        config = {"KEY_PREFIX": bloom_prefix, "MIRROR_FILTERS": ["hot"], **extra}
        return override_settings(DJANGO_BLOOM=config)

    return settings


@pytest.fixture
def sends(sent_commands):
    return sent_commands


def test_reads_make_no_round_trip_after_loading(mirrored, sends):
    with mirrored(MIRROR_REFRESH_SECONDS=60):
        f = django_bloom.create_filter("hot", capacity=1000)
        f.add_many(["a", "b"])
        f.contains("a")  # loads the copy
        # The tracking listener registers the key, then asks for one re-check (a
        # write may have landed between the load and the registration).
        registered(f)
        f.contains("a")
        before = len(sends)
        assert [f.contains(x) for x in ("a", "b", "c")] == [True, True, False]
        assert f.contains_many(["a", "zz"]) == [True, False]
        assert len(sends) == before
        assert mirror.mirror_for(f).loads == 1


def test_own_writes_are_seen_at_once(mirrored):
    with mirrored(MIRROR_REFRESH_SECONDS=60):
        f = django_bloom.create_filter("hot", capacity=1000)
        assert not f.contains("new")
        f.add("new")
        assert f.contains("new")


def test_other_writers_are_seen_within_the_refresh_interval(mirrored):
    with mirrored(MIRROR_REFRESH_SECONDS=0.2):
        f = django_bloom.create_filter("hot", capacity=1000)
        assert not f.contains("from-elsewhere")
        # Another process writes straight to Redis (not through this mirror).
        f.storage.set(f.layout.segment, f.positions(f.hashes(["from-elsewhere"])))
        deadline = time.monotonic() + 5
        while not f.contains("from-elsewhere"):
            assert time.monotonic() < deadline, "mirror never picked up the change"
            time.sleep(0.05)
        f.clear()
        deadline = time.monotonic() + 5
        while f.contains("from-elsewhere"):
            assert time.monotonic() < deadline, "mirror never saw the clear"
            time.sleep(0.05)


def test_lost_key_raises_instead_of_answering_from_an_old_copy(mirrored, redis_client):
    with mirrored(MIRROR_REFRESH_SECONDS=0):
        f = django_bloom.create_filter("hot", capacity=1000)
        f.add("x")
        assert f.contains("x")
        redis_client.delete(f.layout.segment.keys.bits)
        with pytest.raises(FilterKeyMissing):
            f.contains("x")


def test_filters_over_the_memory_cap_read_from_redis(mirrored, sends):
    with mirrored(MIRROR_MAX_BYTES=100):
        f = django_bloom.create_filter("hot", capacity=1000)
        assert mirror.mirror_for(f) is None
        before = len(sends)
        f.contains("a")
        assert len(sends) == before + 1


def test_not_opted_in_means_no_mirror(bloom_prefix):
    f = django_bloom.create_filter("cold", capacity=1000)
    assert mirror.mirror_for(f) is None
