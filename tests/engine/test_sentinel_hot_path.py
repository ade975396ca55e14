"""Sentinel: the engine's kept hot-path connections follow a failover.

A django-redis alias configured for Sentinel (``SentinelClient``,
``SentinelConnectionFactory``, ``SENTINELS``); one ``Filter`` handle, created
before the failover, is used throughout: single and batch (streamed) add and
contains. After Sentinel promotes the replica, the same handle answers from
the new primary within a few calls, and never "absent" for an item added with
``WRITE_REPLICAS`` (acknowledged by the replica that became the primary).
"""

from __future__ import annotations

import time

import pytest
from django.test import override_settings

import django_bloom
from django_bloom.exceptions import FilterUnavailable, RedisRefused
from tests.engine.test_failover import sentinel_alias, sentinel_group  # noqa: F401  (the fixture)

pytestmark = [pytest.mark.django_db, pytest.mark.slow]

ITEMS = [f"acked-{i}@example.org" for i in range(600)]  # more than one streamed chunk


def answers_after_failover(f) -> tuple[int, float]:
    """Call the handle until it answers; every answer must hold every acked item.
    Returns (calls that raised, seconds until the first full answer)."""
    start, failed = time.monotonic(), 0
    while True:
        try:
            assert f.contains("acked-single@example.org") is True  # never a false absent
            assert all(f.contains_many(ITEMS))
            return failed, time.monotonic() - start
        except (FilterUnavailable, RedisRefused):  # unreachable, breaker open, READONLY
            failed += 1
            assert time.monotonic() - start < 30, "the handle never followed the failover"
            time.sleep(0.05)


@pytest.mark.parametrize("how", ["SENTINEL FAILOVER", "SIGKILL"])
@pytest.mark.parametrize("layout", ["standard", "blocked"])
def test_the_same_handle_follows_a_failover(sentinel_group, settings, bloom_prefix, how, layout):  # noqa: F811
    service, primary, replica, sentinels = sentinel_group
    alias = sentinel_alias(settings, service, sentinels)
    settings.DJANGO_BLOOM = {"KEY_PREFIX": bloom_prefix, "WRITE_REPLICAS": 1}
    f = django_bloom.create_filter("ha", capacity=10_000, cache_alias=alias, layout=layout)
    assert f.add("acked-single@example.org")  # WAIT 1: the replica has it
    # Acknowledged, not necessarily new: a one-word (blocked) filter may call an item of
    # 600 "maybe present" already (a false positive at 6% load; the matrix met one).
    assert len(f.add_many(ITEMS)) == len(ITEMS)
    assert all(f.contains_many(ITEMS))

    if how == "SIGKILL":
        primary.kill()
    else:
        sentinels[0].client().execute_command("SENTINEL", "FAILOVER", service)
    # The site keeps calling meanwhile: errors (fast, the breaker opens), never "absent".
    deadline, during = time.monotonic() + 30, 0
    while sentinels[0].client().sentinel_get_master_addr_by_name(service)[1] != replica.port:
        assert time.monotonic() < deadline, "Sentinel never promoted the replica"
        try:
            assert f.contains("acked-single@example.org") is True
        except (FilterUnavailable, RedisRefused):
            during += 1
        time.sleep(0.02)
    if how == "SIGKILL":
        assert during > 0  # the primary really was gone for a while
    failed, seconds = answers_after_failover(f)
    print(
        f"\n[figures] {how} ({layout}): the same handle answered after {failed} failed calls, "
        f"{seconds:.2f} s after Sentinel named the new primary"
    )
    assert replica.client().info("replication")["role"] == "master"

    # Writes go to the new primary (no replica to wait for after a SIGKILL).
    with override_settings(DJANGO_BLOOM={**settings.DJANGO_BLOOM, "WRITE_REPLICAS": 0}):
        deadline, write_failed = time.monotonic() + 30, 0
        while True:
            try:
                assert f.add("after-failover") is True
                break
            except (FilterUnavailable, RedisRefused):
                write_failed += 1
                assert time.monotonic() < deadline, "writes never followed the failover"
                time.sleep(0.05)
        print(f"[figures] {how} ({layout}): the first write after it failed {write_failed} times")
        later = [f"later-{i}" for i in range(300)]
        assert sum(f.add_many(later)) > 290  # new items (a few may be false positives)
        assert all(f.contains_many(later))
        assert replica.client().exists(f.layout.segment.keys.bits)
        assert f.contains("after-failover") and all(f.contains_many(ITEMS))
