"""Past capacity, adds log one WARNING per filter and process (issue 24, item 6): the
filter, its capacity, the estimated items, the current rate and the remedy, from counts
the process already keeps (no extra round trip)."""

import asyncio
import logging

import pytest

import django_bloom
from django_bloom import capacity, counters

pytestmark = pytest.mark.django_db

LOGGER = "django_bloom.capacity"


def warnings_of(caplog):
    return [r.getMessage() for r in caplog.records if r.name == LOGGER and r.levelname == "WARNING"]


def test_200_adds_into_capacity_100_warn_once(caplog):
    caplog.set_level(logging.WARNING, logger=LOGGER)
    f = django_bloom.create_filter("signups", capacity=100, error_rate=0.01)
    for i in range(100):
        f.add(f"user-{i}")
    assert warnings_of(caplog) == []  # at capacity: nothing yet
    for i in range(100, 200):
        f.add(f"user-{i}")
    f.add_many([f"more-{i}" for i in range(50)])
    (message,) = warnings_of(caplog)  # once, not once per add
    assert "'signups' is past its capacity" in message and "capacity 100" in message
    estimated = int(message.split("about ")[1].split(" items")[0].replace(",", ""))
    assert 100 < estimated <= 101  # the first add past it; later ones are rate-limited
    assert "false-positive rate is now about" in message and "target 1.00% (1 in 100)" in message
    assert "Filter.rebuild(items, capacity=" in message and "'scalable'" in message


def test_each_filter_warns_for_itself_and_again_after_the_interval(caplog, monkeypatch):
    caplog.set_level(logging.WARNING, logger=LOGGER)
    a = django_bloom.create_filter("a", capacity=10, error_rate=0.01)
    b = django_bloom.create_filter("b", capacity=10, error_rate=0.01)
    a.add_many([f"x{i}" for i in range(30)])
    b.add_many([f"x{i}" for i in range(30)])
    assert len(warnings_of(caplog)) == 2
    a.add("one-more")
    assert len(warnings_of(caplog)) == 2
    monkeypatch.setattr(capacity, "WARN_EVERY_SECONDS", 0.0)
    # Some are new even at this fill: each new one reads present (no bit set, nothing
    # counted) with p ~ 0.46 while none has been new; 10 all did so once (a CI run), 40 won't.
    a.add_many([f"y{i}" for i in range(40)])
    assert len(warnings_of(caplog)) == 3


def test_the_estimate_counts_other_processes_adds_as_redis_answered_a_flush(
    caplog, redis_client
):
    caplog.set_level(logging.WARNING, logger=LOGGER)
    f = django_bloom.create_filter("shared", capacity=100, error_rate=0.01)
    key = f.counters_segment.keys.counters
    redis_client.hincrby(key, "items_added", 90)  # other processes' adds, flushed
    f.add_many([f"mine-{i}" for i in range(5)])
    counters.flush()  # Redis answers the total: 95
    assert warnings_of(caplog) == []
    f.add_many([f"more-{i}" for i in range(10)])
    (message,) = warnings_of(caplog)
    assert "about 105 items added" in message


def test_a_bound_filter_is_told_to_rebuild_from_its_source(caplog):
    caplog.set_level(logging.WARNING, logger=LOGGER)
    f = django_bloom.create_filter(
        "names", capacity=10, error_rate=0.01, source="testapp.Account.username"
    )
    f.add_many([f"n{i}" for i in range(20)])
    (message,) = warnings_of(caplog)
    estimated = int(message.split("about ")[1].split(" items")[0])
    assert f"manage.py bloom rebuild names --capacity {2 * estimated}" in message


def test_async_adds_warn_too(caplog):
    caplog.set_level(logging.WARNING, logger=LOGGER)
    f = django_bloom.create_filter("async-one", capacity=10, error_rate=0.01)

    async def fill():
        await f.aadd_many([f"a{i}" for i in range(15)])
        await f.aadd("b")

    asyncio.run(fill())
    assert len(warnings_of(caplog)) == 1


@pytest.mark.parametrize(
    "kwargs",
    [
        {"layout": "scalable"},
        {"layout": "rotating", "options": {"slices": 2, "slice_seconds": 60}},
        {"layout": "counting"},
    ],
)
def test_kinds_whose_capacity_is_no_limit_do_not_warn(caplog, kwargs):
    caplog.set_level(logging.WARNING, logger=LOGGER)
    f = django_bloom.create_filter("free", capacity=10, error_rate=0.01, **kwargs)
    f.add_many([f"z{i}" for i in range(50)])
    assert warnings_of(caplog) == []


def test_family_members_do_not_warn(caplog):
    caplog.set_level(logging.WARNING, logger=LOGGER)
    django_bloom.create_filter("fam", capacity=10, error_rate=0.01, family=True)
    django_bloom.get_filter("fam", member=1).add_many([f"m{i}" for i in range(50)])
    assert warnings_of(caplog) == []


def test_no_extra_round_trip_past_capacity(sent_commands, caplog):
    caplog.set_level(logging.WARNING, logger=LOGGER)
    f = django_bloom.create_filter("rt", capacity=5, error_rate=0.01)
    sent_commands.clear()
    for i in range(20):
        f.add(f"r{i}")
    assert len(sent_commands) == 20 and len(warnings_of(caplog)) == 1


def test_a_rebuild_with_a_larger_capacity_is_quiet(caplog):
    caplog.set_level(logging.WARNING, logger=LOGGER)
    f = django_bloom.create_filter("grown", capacity=10, error_rate=0.01)
    items = [f"g{i}" for i in range(30)]
    f.add_many(items)
    assert len(warnings_of(caplog)) == 1
    capacity.forget()
    f.rebuild(items, capacity=100)
    f.add_many([f"h{i}" for i in range(30)])
    assert len(warnings_of(caplog)) == 1


def test_the_warned_rate_is_asked_of_the_kind(bloom_prefix):
    """Kind knowledge lives in the kind: the rate many items give is the layout's own
    formula (``expected_fpr``; the one-word layout's differs), never matched on its name."""
    from django_bloom.engine.kinds import StandardLayout, register_layout, unregister_layout
    from django_bloom.engine.kinds.blocked import BLOCK_BITS, blocked_fpr

    class Pessimist(StandardLayout):
        layout_name = "test-pessimist"

        @classmethod
        def expected_fpr(cls, num_bits, num_items, num_hashes):
            return 0.5

    register_layout(Pessimist)
    try:
        f = django_bloom.create_filter("pessimist", capacity=100, layout="test-pessimist")
        assert capacity.expected_rate(f.meta, 200) == 0.5
    finally:
        unregister_layout("test-pessimist")
    m = django_bloom.create_filter("one-word", capacity=1000, layout="blocked").meta
    assert capacity.expected_rate(m, 2000) == blocked_fpr(m.num_bits // BLOCK_BITS, 2000,
                                                          m.num_hashes)  # fmt: skip
