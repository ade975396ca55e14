"""Rotating time windows (layout ``rotating``) on the real Redis: second-long slices.

No timing asserts: where time matters the test reads the REDIS SERVER's clock
(the one the script uses) and asserts what must hold at that server time, or
polls with a generous upper bound.
"""

from __future__ import annotations

import multiprocessing
import time

import pytest
import redis
from django.core.checks import Warning
from django.test import override_settings

import django_bloom
from django_bloom import checks
from django_bloom.engine.kinds.rotating import commands as rotating_ops
from django_bloom.exceptions import FilterKeyMissing
from django_bloom.models import BloomFilter
from tests.conftest import caches_with

pytestmark = pytest.mark.django_db
DB = ["default"]
POLL_LIMIT = 30.0  # seconds: generous, the machine is shared


def server_now(client) -> float:
    seconds, micros = client.time()
    return seconds + micros / 1e6


def server_epoch(client, slice_seconds: int) -> int:
    return int(server_now(client) // slice_seconds)


def wait_for_epoch(client, slice_seconds: int, epoch: int) -> None:
    deadline = time.monotonic() + POLL_LIMIT
    while server_epoch(client, slice_seconds) < epoch:
        assert time.monotonic() < deadline, "the server's clock did not advance"
        time.sleep(0.05)


def slice_keys(client, f) -> list[bytes]:
    return sorted(client.scan_iter(match=f.layout.window.slice_pattern, count=1000))


def rotating(name="window", slices=2, slice_seconds=1, capacity=1000, **kw):
    return django_bloom.create_filter(
        name,
        capacity=capacity,
        error_rate=0.01,
        layout="rotating",
        options={"slices": slices, "slice_seconds": slice_seconds},
        **kw,
    )


# -- the window -------------------------------------------------------------------
def test_an_item_is_seen_for_the_whole_window_then_forgotten(redis_client):
    f = rotating(slices=2, slice_seconds=1)
    before = server_epoch(redis_client, 1)
    assert f.add("visitor-1") is True
    after = server_epoch(redis_client, 1)  # the item went into slice `before` or `after`
    # Remembered at least while the server's epoch is <= (its slice) + W.
    while True:
        start = server_epoch(redis_client, 1)
        seen = f.contains("visitor-1")
        end = server_epoch(redis_client, 1)
        if end > before + 2:
            break
        assert seen, f"forgotten within the window (epochs {before}..{after}, now {start})"
        time.sleep(0.1)
    # ... and forgotten once its slice is out of the window (at most W + 1 slices later).
    deadline = time.monotonic() + POLL_LIMIT
    while True:
        start = server_epoch(redis_client, 1)
        if not f.contains("visitor-1"):
            break
        assert time.monotonic() < deadline, "never forgotten"
        time.sleep(0.1)
    assert start > before + 2  # not forgotten before W slices had passed
    assert f.add("visitor-1") is True  # new again


def test_was_new_is_checked_against_every_live_slice(redis_client):
    f = rotating(slices=3, slice_seconds=1)
    assert f.add("a") is True
    assert f.add("a") is False
    first = slice_keys(redis_client, f)
    assert len(first) == 1
    wait_for_epoch(redis_client, 1, int(first[0].rsplit(b":", 1)[1]) + 1)
    assert f.add("a") is False  # in an older live slice: not new
    assert f.add("b") is True
    assert len(slice_keys(redis_client, f)) == 2  # the add wrote the current slice too
    assert f.contains_many(["a", "b", "c"]) == [True, True, False]


def test_the_current_slice_follows_the_servers_clock_not_the_clients(redis_client, monkeypatch):
    f = rotating(slices=2, slice_seconds=60)
    real = time.time
    monkeypatch.setattr(time, "time", lambda: real() + 86400)  # a client a day ahead
    before = server_epoch(redis_client, 60)
    f.add("skewed")
    after = server_epoch(redis_client, 60)
    (key,) = slice_keys(redis_client, f)
    assert before <= int(key.rsplit(b":", 1)[1]) <= after


def test_slice_keys_expire_and_the_control_key_does_not(redis_client):
    f = rotating(slices=3, slice_seconds=2)
    f.add("x")
    (key,) = slice_keys(redis_client, f)
    ttl = redis_client.pttl(key)
    # A slice leaves the window by a step (and is deleted then); its TTL only collects the
    # keys of a filter nobody uses: two windows (W + 2 slices each) and a day.
    assert (2 * (3 + 2) * 2 + 86400 - 60) * 1000 < ttl <= (2 * (3 + 2) * 2 + 86400) * 1000
    assert redis_client.ttl(f.layout.segment.keys.bits) == -1
    assert redis_client.exists(f.layout.segment.keys.bits)


def test_a_lost_control_key_raises_and_writes_nothing(redis_client):
    f = rotating(slices=2, slice_seconds=60)
    f.add("kept")
    redis_client.delete(f.layout.segment.keys.bits)  # e.g. a restart without persistence
    with pytest.raises(FilterKeyMissing, match="control key"):
        f.contains("kept")
    with pytest.raises(FilterKeyMissing):
        f.contains_many(["kept", "other"])
    for key in slice_keys(redis_client, f):
        redis_client.delete(key)
    with pytest.raises(FilterKeyMissing):
        f.add("new")
    with pytest.raises(FilterKeyMissing):
        f.add_many(["new", "newer"])
    assert slice_keys(redis_client, f) == []  # the refused add created no slice
    with pytest.raises(FilterKeyMissing):
        f.stats()
    assert [m.id for m in checks.check_filters(databases=DB)] == ["django_bloom.W005"]
    redis_client.rpush(f.layout.segment.keys.bits, "not a filter")  # another type at the name
    with pytest.raises(FilterKeyMissing):
        f.contains("kept")
    with pytest.raises(FilterKeyMissing):
        f.add("new")


def test_a_foreign_slice_key_is_refused(redis_client):
    f = rotating(slices=2, slice_seconds=60)
    f.add("x")
    (key,) = slice_keys(redis_client, f)
    redis_client.set(key, b"\x00" * 200)  # right name, not this filter's trailer
    with pytest.raises(FilterKeyMissing):
        f.contains("x")
    with pytest.raises(FilterKeyMissing):
        f.add("x")


# -- batches, input, round trips ---------------------------------------------------
def test_batches_across_script_calls():
    f = rotating(slices=2, slice_seconds=60, capacity=5000)
    items = [f"item-{i}" for i in range(3000)]  # more positions than one script call takes
    assert len(items) * f.meta.num_hashes > rotating_ops.POSITIONS_PER_CALL
    was_new = f.add_many(items)
    assert sum(was_new) > 0.99 * len(items)  # a few false positives: "maybe seen"
    assert f.add_many(items[:10] + ["fresh"]) == [False] * 10 + [True]
    assert all(f.contains_many(items))
    strangers = f.contains_many([f"stranger-{i}" for i in range(3000)])
    assert sum(strangers) < 0.05 * len(strangers)  # p = 0.01 per slice, 1 slice written
    assert f.add_many([]) == [] and f.contains_many([]) == []
    assert f.add_many(["twice", "twice"]) == [True, False]


def test_one_round_trip_per_operation(sent_commands):
    f = rotating(slices=24, slice_seconds=3600)
    f.add("warm")  # loads the script once (NOSCRIPT, SCRIPT LOAD)
    sent_commands.clear()
    assert f.add("one") is True
    assert f.contains("one") is True
    assert f.add_many(["two", "three"]) == [True, True]
    assert f.contains_many(["two", "nope"]) == [True, False]
    assert len(sent_commands) == 4


def test_the_script_is_loaded_again_after_a_script_flush(redis_client):
    f = rotating(slices=2, slice_seconds=60)
    f.add("before")
    redis_client.script_flush()
    assert f.add("after") is True
    assert f.contains_many(["before", "after"]) == [True, True]


def _add_in_child(pk_items, queue):
    from django_bloom.filter import Filter

    meta, items = pk_items
    handle = Filter(meta)
    queue.put(handle.add_many(items))


def test_processes_adding_at_once_each_item_is_new_exactly_once(redis_client):
    f = rotating(slices=2, slice_seconds=60, capacity=2000)
    items = [f"shared-{i}" for i in range(500)]
    meta = BloomFilter.objects.get(name="window")
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    children = [ctx.Process(target=_add_in_child, args=((meta, items), queue)) for _ in range(4)]
    for child in children:
        child.start()
    results = [queue.get(timeout=60) for _ in children]
    for child in children:
        child.join(timeout=60)
        assert child.exitcode == 0
    assert [sum(r[i] for r in results) for i in range(len(items))] == [1] * len(items)
    assert f.add_many(items) == [False] * len(items)
    assert len(slice_keys(redis_client, f)) <= 2


# -- options, lifecycle, stats ----------------------------------------------------
@pytest.mark.parametrize(
    "options",
    [{"slices": 0}, {"slices": "24"}, {"slice_seconds": 0}, {"slice_seconds": 1.5},
     {"slices": True}, {"window": 3}, {"slices": 10**6}],
)  # fmt: skip
def test_bad_options_are_refused_before_anything_is_written(redis_client, bloom_prefix, options):
    with pytest.raises(ValueError):
        django_bloom.create_filter("bad", capacity=10, layout="rotating", options=options)
    assert not BloomFilter.objects.filter(name="bad").exists()
    assert list(redis_client.scan_iter(match=f"{bloom_prefix}:*")) == []


def test_a_row_whose_options_changed_raises_instead_of_reading_other_slices():
    f = rotating(slices=3, slice_seconds=60)
    f.add("kept")
    BloomFilter.objects.filter(name="window").update(options={"slices": 5, "slice_seconds": 60})
    edited = django_bloom.get_filter("window", refresh=True)
    with pytest.raises(FilterKeyMissing):
        edited.contains("kept")
    with pytest.raises(FilterKeyMissing):
        edited.add("kept")
    assert f.contains("kept") is True  # the keys still answer their own geometry


def test_defaults_are_stored():
    f = django_bloom.create_filter("day", capacity=10, layout="rotating")
    assert f.meta.options == {"slices": 24, "slice_seconds": 3600}
    assert f.layout.window_seconds == 86400


def test_stats_show_the_window():
    f = rotating(slices=3, slice_seconds=60, capacity=1000)
    f.add_many([f"i-{n}" for n in range(100)])
    stats = f.stats()
    assert stats.details["window_seconds"] == 180
    assert stats.details["slice_seconds"] == 60
    assert stats.details["slices"] == 3
    assert stats.details["slices_live"] == 1
    assert 90 < stats.estimated_items < 110  # the fullest slice
    assert 90 < stats.details["items_in_window"] < 110
    assert 0 < stats.details["window_fpr"] < 0.01
    assert stats.memory_bytes > f.layout.segment.num_bytes
    assert stats.as_dict()["details"]["slices_live"] == 1


# -- the eviction check -----------------------------------------------------------
def test_volatile_policy_warns_when_a_rotating_filter_lives_there(private_redis, settings):
    location = private_redis("--maxmemory-policy", "volatile-lru")
    with override_settings(CACHES=caches_with("window", location)):
        django_bloom.create_filter("plain", capacity=10, cache_alias="window")
        assert checks.check_redis(databases=DB) == []  # plain keys have no TTL
        django_bloom.create_filter(
            "recent", capacity=10, cache_alias="window", layout="rotating",
            options={"slices": 2, "slice_seconds": 60},
        )  # fmt: skip
        assert checks.check_redis(databases=DB) == [
            Warning(
                "Redis for cache alias 'window' has maxmemory-policy 'volatile-lru': it may "
                "evict the slice keys of rotating filters ('recent') before their window ends, "
                'and an evicted slice answers "absent" for items it held.',
                hint="Set maxmemory-policy to noeviction: rotating filters' slice keys carry "
                "a TTL, so volatile-* policies may evict them.",
                obj="window",
                id="django_bloom.W001",
            )
        ]
        redis.Redis.from_url(location).config_set("maxmemory-policy", "noeviction")
        assert checks.check_redis(databases=DB) == []
        redis.Redis.from_url(location).config_set("maxmemory-policy", "allkeys-lru")
        assert [m.id for m in checks.check_redis(databases=DB)] == ["django_bloom.W001"]


def test_the_admin_detail_page_shows_the_window(admin_client):
    from django.urls import reverse

    from django_bloom.ops import monitoring

    f = rotating(name="recent", slices=24, slice_seconds=3600)
    f.add_many(["a", "b"])
    monitoring.forget_stats()
    html = admin_client.get(
        reverse("admin:django_bloom_bloomfilter_change", args=[f.meta.pk])
    ).content.decode()
    assert "time window" in html
    assert "24 slices of 3,600 s (86,400 s); 1 live" in html
    assert "false positives over the window" in html
    changelist = admin_client.get(reverse("admin:django_bloom_bloomfilter_changelist"))
    assert "recent" in changelist.content.decode()
    monitoring.forget_stats()


def test_bloom_create_takes_layout_options():
    from django.core.management import call_command
    from django.core.management.base import CommandError

    call_command(
        "bloom", "create", "cli-window", "--capacity", "100", "--layout", "rotating",
        "--option", "slices=6", "--option", "slice_seconds=600", verbosity=0,
    )  # fmt: skip
    assert BloomFilter.objects.get(name="cli-window").options == {
        "slices": 6,
        "slice_seconds": 600,
    }
    with pytest.raises(CommandError, match="slices"):
        call_command(
            "bloom", "create", "cli-bad", "--capacity", "100", "--layout", "rotating",
            "--option", "slices=zero", verbosity=0,
        )  # fmt: skip
    with pytest.raises(CommandError, match="KEY=VALUE"):
        call_command("bloom", "create", "cli-bad", "--capacity", "100", "--option", "x")
    assert not BloomFilter.objects.filter(name="cli-bad").exists()


def test_a_stalled_redis_raises_and_a_late_reply_is_never_read(redis_server, cache_alias):
    from django_bloom.engine.transport import breaker
    from django_bloom.exceptions import RedisUnreachable

    server = redis_server()
    alias = cache_alias("rotating-own", server.url)
    try:
        f = rotating(name="stalls", slices=2, slice_seconds=60, cache_alias=alias)
        f.add_many([f"in-{i}" for i in range(400)])  # more than one script call
        server.pause()
        with pytest.raises(RedisUnreachable):
            f.contains_many([f"out-{i}" for i in range(400)])  # late replies: all zeros
        with pytest.raises(RedisUnreachable):
            f.add("new")
        server.resume()
        deadline = time.monotonic() + POLL_LIMIT
        while True:
            try:
                answers = f.contains_many([f"in-{i}" for i in range(400)])
                break
            except RedisUnreachable:
                assert time.monotonic() < deadline, "never recovered"
                time.sleep(0.2)
        assert answers == [True] * 400
    finally:
        server.resume()
        breaker.reset(alias)


def test_durable_writes_wait_for_a_replica_in_the_same_round_trip(
    redis_server, cache_alias, settings, sent_commands
):
    from django_bloom.exceptions import WriteNotReplicated
    from tests.engine.test_failover import wait_for_link

    lone = cache_alias("lone", redis_server().url)
    # WAIT 10 ms (not the default 100): on a loaded machine WAIT + scripts must stay well
    # inside the 0.2 s read timeout.
    settings.DJANGO_BLOOM = {
        **settings.DJANGO_BLOOM,
        "WRITE_REPLICAS": 1,
        "WRITE_REPLICAS_TIMEOUT_MS": 10,
    }
    f = rotating(name="durable", slices=2, slice_seconds=60, cache_alias=lone)
    f.storage.client.script_flush()  # as after a Redis restart: the script cache is empty
    with pytest.raises(WriteNotReplicated):
        f.add("warm")  # NOSCRIPT (wrote nothing), the script loaded, the add run again
    assert f.contains("warm") is True  # applied on the primary despite the first NOSCRIPT
    sent_commands.clear()
    with pytest.raises(WriteNotReplicated):
        f.add("x")
    assert len(sent_commands) == 1 and b"WAIT" in sent_commands[0]
    with pytest.raises(WriteNotReplicated):
        f.add_many([f"item-{i}" for i in range(300)])  # several pipelined calls, then WAIT
    assert f.contains_many(["x", "item-299", "never"]) == [True, True, False]

    primary = redis_server()
    replica = redis_server("--replicaof", "127.0.0.1", str(primary.port))
    wait_for_link(primary, replica)
    alias = cache_alias("replicated", primary.url)
    g = rotating(name="replicated", slices=2, slice_seconds=60, cache_alias=alias)
    assert g.add_many(["a", "b", *(f"i-{i}" for i in range(500))])[:2] == [True, True]
    assert g.add("a") is False
    (key,) = slice_keys(primary.client(), g)
    assert replica.client().get(key) == primary.client().get(key)
    assert replica.client().pttl(key) > 0  # the TTL replicates with the slice


def test_the_admin_creates_a_rotating_filter_with_default_options(admin_client, redis_client):
    from django.urls import reverse

    resp = admin_client.post(
        reverse("admin:django_bloom_bloomfilter_add"),
        {
            "name": "via-admin", "description": "", "kind": "generic", "capacity": "5000",
            "error_rate": "0.001", "layout": "rotating", "cache_alias": "default",
            "source": "", "normalizer": "", "encoder": "",
        },
    )  # fmt: skip
    assert resp.status_code == 302, resp.content.decode()[:2000]
    f = django_bloom.get_filter("via-admin")
    assert f.meta.options == {"slices": 24, "slice_seconds": 3600}
    assert redis_client.ttl(f.layout.segment.keys.bits) == -1  # the control key
    assert f.add("x") is True and f.contains("x") is True
    resp = admin_client.post(
        reverse("admin:django_bloom_bloomfilter_delete", args=[f.meta.pk]), {"post": "yes"}
    )
    assert resp.status_code == 302
    assert not redis_client.exists(f.layout.segment.keys.bits)
    assert slice_keys(redis_client, f) == []
