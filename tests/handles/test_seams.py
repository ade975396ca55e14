"""The seams of a filter's life: rebuild, resize, stale handles, lost and foreign keys.

A filter must never answer "absent" for an added item, and a handle that holds
an old geometry must never change a bit of the live key.
"""

import threading
import time

import pytest
from django.core.management import CommandError, call_command
from django.db import OperationalError, connection
from django.test import override_settings

import django_bloom
from django_bloom import checks
from django_bloom import ipblock as blocklist
from django_bloom.engine.format import TRAILER_BYTES
from django_bloom.engine.storage import Storage
from django_bloom.exceptions import FilterKeyMissing
from django_bloom.models import BloomFilter
from django_bloom.services import Filter
from django_bloom.unique import sync
from tests.testapp.models import Account
from tests.unique.test_sync import BINDINGS

pytestmark = pytest.mark.django_db
DB = ["default"]


def make(name="f", capacity=1000, error_rate=0.01, **kw):
    return django_bloom.create_filter(name, capacity=capacity, error_rate=error_rate, **kw)


def other_process_handle(name="f"):
    """A handle as another process holds it: its own object, loaded from the row now."""
    return Filter(BloomFilter.objects.get(name=name))


def filter_keys(redis_client, prefix, name="f"):
    return sorted(k.decode() for k in redis_client.scan_iter(match=f"{prefix}:{{{name}}}:*"))


# -- 1. rebuilt filters never expire ----------------------------------------------
def test_rebuilt_filter_has_no_ttl(redis_client):
    f = make()
    assert redis_client.ttl(f.layout.segment.keys.bits) == -1
    f.rebuild(["a", "b"])
    assert redis_client.ttl(f.layout.segment.keys.bits) == -1
    f.rebuild(["a", "b"], capacity=5000)  # a resize too
    assert redis_client.ttl(f.layout.segment.keys.bits) == -1
    assert f.contains_many(["a", "b"]) == [True, True]


def test_rebuild_from_source_has_no_ttl(redis_client, bloom_prefix):
    Account.objects.create(username="a", email="a@example.org")
    with override_settings(DJANGO_BLOOM={"KEY_PREFIX": bloom_prefix, "BINDINGS": BINDINGS}):
        sync.ensure_bound_filters()
        assert sync.rebuild_from_source("account-emails") == 1
        f = django_bloom.get_filter("account-emails", refresh=True)
        assert redis_client.ttl(f.layout.segment.keys.bits) == -1
        sync.rebuild_from_source("account-emails", capacity=4000)
        f = django_bloom.get_filter("account-emails", refresh=True)
        assert redis_client.ttl(f.layout.segment.keys.bits) == -1
        assert f.contains("a@example.org")


def test_rebuild_blocklist_has_no_ttl(redis_client):
    blocklist.block("203.0.113.7")
    assert blocklist.rebuild_blocklist() == 1
    f = django_bloom.get_filter("ip-blocklist", refresh=True)
    assert redis_client.ttl(f.layout.segment.keys.bits) == -1
    assert blocklist.check_ip("203.0.113.7").blocked


# -- 2. a handle with the old geometry never changes a bit of the live key --------
@pytest.mark.parametrize("new_capacity", [20_000, 100], ids=["grown", "shrunk"])
def test_stale_handle_never_writes_into_a_resized_filter(redis_client, bloom_prefix, new_capacity):
    make(capacity=1000)
    stale = other_process_handle()
    stale.add_many([f"before-{i}" for i in range(50)])
    old_layout, old_flat = stale.layout, stale._digest_one("late")[1]

    other_process_handle().rebuild([f"before-{i}" for i in range(50)], capacity=new_capacity)
    live = other_process_handle()
    # a new geometry, a new key name
    assert live.layout.segment.keys.bits != old_layout.segment.keys.bits
    key = live.layout.segment.keys.bits
    snapshot = redis_client.get(key)

    # The raw write of the old geometry: refused, the live key unchanged, no stray left.
    with pytest.raises(FilterKeyMissing):
        Storage("default").set(old_layout.segment, old_flat)
    assert redis_client.get(key) == snapshot
    assert not redis_client.exists(old_layout.segment.keys.bits)

    # Through the handle: it refreshes and its single retry lands in the new key.
    assert stale.add("late") is True
    assert stale.layout == live.layout
    after = redis_client.get(key)
    assert len(after) == len(snapshot) == live.layout.key_bytes
    bitmaps = zip(snapshot[:-TRAILER_BYTES], after[:-TRAILER_BYTES], strict=True)
    changed = {
        byte * 8 + bit
        for byte, (a, b) in enumerate(bitmaps)
        for bit in range(8)
        if (a ^ b) & (0x80 >> bit)
    }
    assert changed <= set(live._digest_one("late")[1])  # only the new item's own bits
    assert all(live.contains_many([f"before-{i}" for i in range(50)] + ["late"]))
    # the bits key and the counters hash (items_added: the rebuild's 50), nothing else
    counters_key = live.layout.segment.keys.counters
    assert filter_keys(redis_client, bloom_prefix) == sorted([key, counters_key])


def test_stale_handle_reads_heal_too():
    make(capacity=1000)
    stale = other_process_handle()
    stale.add("x")
    other_process_handle().rebuild(["x"], capacity=50_000)
    assert stale.contains("x") is True
    assert stale.contains_many(["x", "y"]) == [True, False]
    assert stale.meta.capacity == 50_000


def test_rebuild_with_the_same_geometry_keeps_the_key_name():
    f = make()
    name = f.layout.segment.keys.bits
    f.rebuild(["a"])
    assert f.layout.segment.keys.bits == name
    assert other_process_handle().layout.segment.keys.bits == name


def busy_wait(execute, sql, params, many, context):
    """The in-memory SQLite test database fails at once on a table another
    connection is reading ("database table is locked"): wait and retry, as a
    database server (or a file database's busy timeout) would."""
    for _ in range(500):
        try:
            return execute(sql, params, many, context)
        except OperationalError as exc:
            if "locked" not in str(exc):
                raise
            time.sleep(0.01)
    return execute(sql, params, many, context)


def read_all(rows: list[str]):
    yield from list(rows)  # copied at the first read, not when the generator is made


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)  # the threads read the row on their own connections
def test_resize_while_threads_add_through_handles_they_got_before(redis_client, bloom_prefix):
    make(capacity=2000)
    cached = django_bloom.get_filter("f")  # shared by the adders and the rebuild
    handles = [cached, cached, other_process_handle(), other_process_handle()]
    added: list[list[str]] = [[] for _ in handles]
    source: list[str] = []  # the source of truth: each item is recorded before its add
    stop = threading.Event()
    started = threading.Barrier(len(handles) + 1)

    def adder(n: int) -> None:
        started.wait()
        i = 0
        with connection.execute_wrapper(busy_wait):
            while not stop.is_set() or i < 50:
                item = f"t{n}-{i}"
                source.append(item)
                try:
                    handles[n].add(item)
                except FilterKeyMissing:  # only between the swap and the row save
                    pass
                else:
                    added[n].append(item)
                i += 1
        connection.close()

    threads = [threading.Thread(target=adder, args=(n,)) for n in range(len(handles))]
    for t in threads:
        t.start()
    started.wait()
    try:
        with connection.execute_wrapper(busy_wait):
            for capacity in (20_000, 8000, 500):
                # Read after the rebuild has flagged the key (as a queryset is): adds
                # that began earlier are in it, later ones are journaled.
                cached.rebuild(read_all(source), capacity=capacity)
        after_last = len(source) + 400
        while len(source) < after_last and all(t.is_alive() for t in threads):
            time.sleep(0.01)  # the old handles keep adding after the last swap
    finally:
        stop.set()
        for t in threads:
            t.join()
    live = other_process_handle()
    everything = [item for items in added for item in items]
    print(f"{len(everything)} adds, {len(source) - len(everything)} refused")
    assert len(everything) > 200
    assert all(live.contains_many(everything))
    assert redis_client.strlen(live.layout.segment.keys.bits) == live.layout.key_bytes
    assert [k for k in filter_keys(redis_client, bloom_prefix) if k.endswith("bits")] == [
        live.layout.segment.keys.bits
    ]


def test_legacy_rows_keep_their_key_names(redis_client, bloom_prefix):
    f = make()
    f.add("old")
    legacy = f"{bloom_prefix}:{{f}}:v1:bits"
    redis_client.rename(f.layout.segment.keys.bits, legacy)  # a key written before generations
    BloomFilter.objects.filter(name="f").update(generation="")
    g = django_bloom.get_filter("f", refresh=True)
    assert g.layout.segment.keys.bits == legacy
    assert g.contains("old") and g.add("new")
    g.rebuild(["old", "new"])  # same geometry: same (legacy) name
    assert g.layout.segment.keys.bits == legacy and g.contains("new")
    g.rebuild(["old", "new"], capacity=9000)  # a resize moves it to a generation name
    assert g.layout.segment.keys.bits != legacy and not redis_client.exists(legacy)
    assert g.contains_many(["old", "new"]) == [True, True]


def test_new_filters_get_a_generation_in_their_key_name(bloom_prefix):
    a = make("a")
    assert a.meta.generation and a.layout.segment.keys.bits == (
        f"{bloom_prefix}:{{a}}:v1:{a.meta.generation}:bits"
    )


def test_a_handle_to_a_deleted_filter_never_writes_into_its_successor(redis_client):
    old = make("re")
    old.add("one")
    old.delete()
    new = make("re")
    snapshot = redis_client.get(new.layout.segment.keys.bits)
    with pytest.raises(FilterKeyMissing):
        old.add("two")
    assert redis_client.get(new.layout.segment.keys.bits) == snapshot
    assert not redis_client.exists(old.layout.segment.keys.bits)


def test_delete_removes_every_generation(redis_client, bloom_prefix):
    f = make()
    f.rebuild([], capacity=5000)
    # A stray a stale writer left when its process died before the cleanup:
    redis_client.set(f"{bloom_prefix}:{{f}}:v1:0badc0de:bits", b"\0" * 64)
    redis_client.set(f"{bloom_prefix}:{{f}}:v1:bits", b"\0" * 64)  # and a legacy one
    make("f-other")  # another filter whose name starts the same: untouched
    f.delete()
    assert filter_keys(redis_client, bloom_prefix) == []
    assert filter_keys(redis_client, bloom_prefix, "f-other") != []


# -- 3. a lost key does not look healthy after one refused write ----------------------
def test_refused_write_to_a_lost_key_leaves_nothing_behind(redis_client):
    f = make()
    f.add("registered")
    redis_client.delete(f.layout.segment.keys.bits)
    with pytest.raises(FilterKeyMissing):
        f.add("other")
    assert not redis_client.exists(f.layout.segment.keys.bits)
    with pytest.raises(FilterKeyMissing):
        f.add_many([f"batch-{i}" for i in range(5000)])  # several commands
    assert not redis_client.exists(f.layout.segment.keys.bits)
    with pytest.raises(FilterKeyMissing):
        f.stats()
    assert [m.id for m in checks.check_filters(databases=DB)] == ["django_bloom.W005"]


def assert_every_health_path_says_missing(f):
    """stats(), the W005 check and `bloom stats` (exit 2) all see a missing key."""
    with pytest.raises(FilterKeyMissing):
        f.stats()
    assert [m.id for m in checks.check_filters(databases=DB)] == ["django_bloom.W005"]
    with pytest.raises(CommandError) as info:
        call_command("bloom", "stats", f.name)
    assert info.value.returncode == 2


def test_zero_trailer_key_is_not_healthy(redis_client):
    # What a refused write left behind before the cleanup existed: full size, zero trailer.
    f = make()
    redis_client.set(f.layout.segment.keys.bits, b"\0" * f.layout.key_bytes)
    assert_every_health_path_says_missing(f)


# -- 5. keys of another type -------------------------------------------------------------
def put_another_type(redis_client, key, kind="list"):
    redis_client.delete(key)
    if kind == "list":
        redis_client.rpush(key, "x")
    else:
        redis_client.hset(key, "x", "1")


@pytest.mark.parametrize("kind", ["list", "hash"])
def test_key_of_another_type_is_missing_and_rebuild_repairs_it(redis_client, kind):
    f = make()
    key = f.layout.segment.keys.bits
    put_another_type(redis_client, key, kind)
    with pytest.raises(FilterKeyMissing):
        f.contains("a")
    with pytest.raises(FilterKeyMissing):
        f.add("a")
    assert_every_health_path_says_missing(f)
    assert f.rebuild(["a"]) == 1
    assert redis_client.type(key) == b"string" and f.contains("a")
    assert f.stats().bits_set > 0


def test_bloom_rebuild_repairs_a_key_of_another_type(redis_client, bloom_prefix):
    Account.objects.create(username="a", email="a@example.org")
    with override_settings(DJANGO_BLOOM={"KEY_PREFIX": bloom_prefix, "BINDINGS": BINDINGS}):
        sync.ensure_bound_filters()
        f = django_bloom.get_filter("account-emails")
        put_another_type(redis_client, f.layout.segment.keys.bits)
        call_command("bloom", "rebuild", "account-emails", stdout=None)
        f = django_bloom.get_filter("account-emails", refresh=True)
        assert f.contains("a@example.org")
        call_command("bloom", "stats", "account-emails")


def test_clear_replaces_a_key_of_another_type(redis_client):
    f = make()
    put_another_type(redis_client, f.layout.segment.keys.bits)
    f.clear()
    assert f.add("a") is True and f.contains("a")


def test_stale_handle_clears_the_live_key(redis_client):
    make()
    stale = other_process_handle()
    live = other_process_handle()
    live.rebuild(["a"], capacity=9000)
    stale.clear()
    assert not redis_client.exists(stale.layout.segment.keys.bits)
    assert live.contains("a") is False  # the live key was the one emptied


def test_mirror_follows_a_refreshed_handle(bloom_prefix):
    config = {"KEY_PREFIX": bloom_prefix, "MIRROR_FILTERS": ["f"], "MIRROR_REFRESH_SECONDS": 0}
    with override_settings(DJANGO_BLOOM=config):
        make(capacity=1000)
        stale = other_process_handle()
        stale.add("a")
        assert stale.contains("a") and stale._mirror().layout == stale.layout
        other_process_handle().rebuild(["a"], capacity=30_000)
        assert stale.contains("a") is True  # the old mirror's key is gone: refresh, retry
        assert stale._mirror().layout == stale.layout == other_process_handle().layout
        assert stale.add("b") is True and stale.contains("b")


@pytest.mark.parametrize("damage", ["another type", "zero trailer"])
def test_admin_changelist_shows_a_broken_key_as_unavailable(admin_client, redis_client, damage):
    from django.urls import reverse

    from django_bloom.ops import monitoring

    f = make("broken")
    if damage == "another type":
        put_another_type(redis_client, f.layout.segment.keys.bits)
    else:
        redis_client.set(f.layout.segment.keys.bits, b"\0" * f.layout.key_bytes)
    monitoring.forget_stats()
    response = admin_client.get(reverse("admin:django_bloom_bloomfilter_changelist"))
    assert response.status_code == 200
    html = response.content.decode()
    assert "broken" in html and "unavailable" in html.lower()
    monitoring.forget_stats()


def test_a_lost_key_costs_the_database_one_query_per_moment_not_per_call(
    redis_client, django_assert_max_num_queries
):
    """A handle whose key is really gone re-reads its row to see whether it moved; while
    the key stays gone it does not ask again on every call (a lost key under load would
    otherwise cost each request a query besides its fallback)."""
    f = make()
    f.add("registered")
    redis_client.delete(f.layout.segment.keys.bits)
    with django_assert_max_num_queries(1):
        for _ in range(20):
            with pytest.raises(FilterKeyMissing):
                f.contains("registered")
