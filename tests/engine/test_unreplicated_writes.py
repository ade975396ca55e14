"""A write short of replicas is read first, reported after (issue 28, seam 1).

With ``WRITE_REPLICAS = 1`` and the replica frozen (SIGSTOP), every add is applied on
the primary and raises ``WriteNotReplicated``. Its replies must still decide first:
a running rebuild's journal gets the item (else the swap loses it), and a handle
from before a resize gets ``FilterKeyMissing`` (the stray key it made is dropped,
it re-binds and retries on the live key). The shortfall is raised after that, and
only for a write that counted.
"""

from __future__ import annotations

import pytest
from asgiref.sync import async_to_sync

import django_bloom
from django_bloom.exceptions import FilterKeyMissing, WriteNotReplicated
from tests.engine.test_failover import wait_for_link

pytestmark = pytest.mark.django_db

SHORT = r"applied the write, but only 0 of 1 replica\(s\).*a failover could lose it"


@pytest.fixture
def unreplicated(redis_server, cache_alias, bloom_settings):
    """A cache alias whose primary has one replica, frozen: every write is short of it."""
    primary = redis_server()
    replica = redis_server("--replicaof", "127.0.0.1", str(primary.port))
    wait_for_link(primary, replica)
    alias = cache_alias("own", primary.url)
    bloom_settings(WRITE_REPLICAS=1, WRITE_REPLICAS_TIMEOUT_MS=20)  # far below SOCKET_TIMEOUT
    replica.pause()
    try:
        yield alias, primary.client()
    finally:
        replica.resume()


def add_sync(handle, item):
    return handle.add(item)


def add_async(handle, item):
    return async_to_sync(handle.aadd)(item)


def add_many_sync(handle, item):
    return handle.add_many([item, *(f"filler-{i}" for i in range(300))])


def rebuilt_around_a_short_add(f, add, **resize):
    """Rebuild ``f`` from a source during whose reading another handle adds "late"
    (short of replicas): what that add raised."""
    writer = django_bloom.get_filter(f.name, refresh=True)
    assert writer is not f
    raised = []

    def source():
        yield "old"
        with pytest.raises(WriteNotReplicated, match=SHORT) as caught:
            add(writer, "late")
        raised.append(caught.value)
        yield "src"

    f.rebuild(source(), **resize)
    return raised


KINDS = {
    "standard": {},
    "blocked": {"layout": "blocked"},
    "counting": {"layout": "counting"},
    "sharded": {"layout": "sharded", "options": {"segments": 3}},
}


@pytest.mark.slow
@pytest.mark.parametrize("add", [add_sync, add_async, add_many_sync])
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("resize", [{}, {"capacity": 3000}], ids=["same", "resized"])
def test_a_short_add_during_a_rebuild_is_kept_after_the_swap(unreplicated, kind, resize, add):
    alias, _primary = unreplicated
    f = django_bloom.create_filter("journaled", capacity=1000, cache_alias=alias, **KINDS[kind])
    assert len(rebuilt_around_a_short_add(f, add, **resize)) == 1
    live = django_bloom.get_filter("journaled", refresh=True)
    assert live.contains_many(["old", "src", "late"]) == [True, True, True]
    assert f.contains("late")


@pytest.mark.slow
@pytest.mark.parametrize("add", [add_sync, add_async])
@pytest.mark.parametrize("resize", [{}, {"capacity": 3000}], ids=["same", "resized"])
def test_a_short_native_add_during_a_rebuild_is_kept_after_the_swap(
    native, bloom_settings, resize, add
):
    """The native kind fills its build key with BF.INSERT, WAITed as any add: only the
    other handle's add runs with WRITE_REPLICAS (this server has no replica at all)."""
    f = native("journaled-native", capacity=1000)

    def add_short(handle, item):
        bloom_settings(WRITE_REPLICAS=1, WRITE_REPLICAS_TIMEOUT_MS=20)
        try:
            return add(handle, item)
        finally:
            bloom_settings(WRITE_REPLICAS=0)

    assert len(rebuilt_around_a_short_add(f, add_short, **resize)) == 1
    live = django_bloom.get_filter("journaled-native", refresh=True)
    assert live.contains_many(["old", "src", "late"]) == [True, True, True]


@pytest.mark.slow
@pytest.mark.parametrize("add", [add_sync, add_async, add_many_sync])
@pytest.mark.parametrize("kind", KINDS)
def test_a_handle_from_before_a_resize_follows_it_when_its_add_is_short(unreplicated, kind, add):
    alias, primary = unreplicated
    f = django_bloom.create_filter("moved", capacity=1000, cache_alias=alias, **KINDS[kind])
    stale = django_bloom.get_filter("moved", refresh=True)
    retired = [segment.keys.bits for segment in stale.layout.segments]
    f.rebuild(["a"], capacity=5000)
    assert primary.exists(*retired) == 0
    # The write to the retired name is refused (its stray key dropped), the handle
    # re-binds and writes to the live key: short of replicas too, and says so.
    with pytest.raises(WriteNotReplicated, match=SHORT):
        add(stale, "x")
    assert primary.exists(*retired) == 0
    assert stale.layout.segment.keys.bits == f.layout.segment.keys.bits != retired[0]
    assert django_bloom.get_filter("moved", refresh=True).contains("x") is True


@pytest.mark.slow
def test_a_short_write_refused_by_its_trailer_is_a_missing_key_not_a_shortfall(unreplicated):
    """A key that is gone (flushed) and no row to move to: the refusal is what the
    caller hears, not "applied the write" (nothing was, the stray was dropped)."""
    alias, primary = unreplicated
    f = django_bloom.create_filter("gone", capacity=1000, cache_alias=alias)
    bits = f.layout.segment.keys.bits
    primary.delete(bits)
    with pytest.raises(FilterKeyMissing) as caught:
        f.add("x")
    assert not isinstance(caught.value, WriteNotReplicated)
    assert primary.exists(bits) == 0


@pytest.mark.slow
def test_a_family_members_refusal_wins_over_the_shortfall(unreplicated):
    """A member handle of a family deleted and created again: its script writes
    nothing, so it says "stale handle", not "applied the write"."""
    alias, _primary = unreplicated
    django_bloom.create_filter("fam", capacity=1000, family=True, cache_alias=alias)
    member = django_bloom.get_filter("fam", member="m1", refresh=True)
    with pytest.raises(WriteNotReplicated, match=SHORT):
        member.add("first")  # a member key is made: applied, short of replicas
    django_bloom.get_family("fam").delete()  # as another process would, then again
    django_bloom.create_filter("fam", capacity=1000, family=True, cache_alias=alias)
    with pytest.raises(FilterKeyMissing, match="deleted") as caught:
        member.add("x")
    assert not isinstance(caught.value, WriteNotReplicated)


@pytest.mark.slow
def test_a_scalable_filters_refusal_wins_over_the_shortfall(unreplicated):
    alias, primary = unreplicated
    f = django_bloom.create_filter("grows", capacity=1000, layout="scalable", cache_alias=alias)
    with pytest.raises(WriteNotReplicated, match=SHORT):
        f.add("first")
    primary.delete(f.layout.control_key)
    with pytest.raises(FilterKeyMissing) as caught:
        f.add("x")
    assert not isinstance(caught.value, WriteNotReplicated)


@pytest.mark.slow
def test_a_short_scalable_batch_writes_every_trip_before_it_says_so(unreplicated):
    """A batch of several round trips: the first trip's shortfall used to be raised at
    once, and the later trips were never sent ("applied the write" for items that were
    not)."""
    alias, _primary = unreplicated
    f = django_bloom.create_filter("trips", capacity=1000, layout="scalable", cache_alias=alias)
    items = [f"item-{i}" for i in range(5000)]  # several trips, and sub-filters to grow
    with pytest.raises(WriteNotReplicated, match=SHORT):
        f.add_many(items)
    assert all(django_bloom.get_filter("trips", refresh=True).contains_many(items))
