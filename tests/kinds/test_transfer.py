"""Export, import and merge (issue 37), for every kind in the registry and for families:
a dump round-trips or the kind says why not; a load into a filter that exists is atomic
(a dump cut short, corrupt or another filter's changes nothing; adds made meanwhile are
kept); a dump streams in bounded chunks; merge ORs compatible filters only.

Every registered kind's round trip, merge, and refusals are the contract's
(tests/contract/test_capabilities.py: ``Transferable``, ``Mergeable``), so a new kind is
tested the day it is registered; here: families, streaming, damage, concurrency, places."""

import io
import threading

import pytest

import django_bloom
from django_bloom.engine import dumpfile
from django_bloom.exceptions import (
    DumpInvalid,
    FilterKeyMissing,
    IncompatibleFilters,
    OperationNotSupported,
)
from django_bloom.family import Family
from django_bloom.loading import load_filter
from django_bloom.services import get_handle

pytestmark = pytest.mark.django_db

OPTIONS = {"sharded": {"segments": 3}}
ITEMS = [f"item-{i}" for i in range(300)]  # past a scalable filter's first capacity: 2+ parts
MEMBERS = (1, "two", "x/y")


def make(request, kind: str, name: str, capacity: int = 0):
    """A filter of ``kind`` holding ``ITEMS`` (a family: in each of ``MEMBERS``); a scalable
    one has grown a second sub-filter."""
    capacity = capacity or (200 if kind == "scalable" else 500)
    if kind == "native":
        f = request.getfixturevalue("native")(name, capacity=capacity)
    elif kind == "family":
        f = django_bloom.create_filter(name, capacity=capacity, family=True, member_ttl=3600)
    else:
        f = django_bloom.create_filter(
            name, capacity=capacity, layout=kind, options=OPTIONS.get(kind)
        )
    for target in [f.member(m) for m in MEMBERS] if kind == "family" else [f]:
        target.add_many(ITEMS)
    return get_handle(name, refresh=True)


def holds_every_item(handle) -> bool:
    if isinstance(handle, Family):
        return all(all(handle.member(m).contains_many(ITEMS)) for m in MEMBERS)
    return all(handle.contains_many(ITEMS))


def test_a_family_round_trips_through_a_dump_as_a_new_family(request):
    """(Every kind's round trip is the contract's: tests/contract/test_capabilities.py.)"""
    f = make(request, "family", "orig")
    dump = b"".join(f.dump(chunk_bytes=64))
    assert f.meta.hasher in dump.decode("latin-1")  # the hash key travels with it
    copy = load_filter("copy", dump, cache_alias=f.meta.cache_alias)
    assert holds_every_item(copy)
    assert copy.meta.hasher == f.meta.hasher and copy.meta.generation != f.meta.generation
    assert get_handle("copy").stats().items_added == f.stats().items_added > 0
    with pytest.raises(OperationNotSupported, match="Delete it and import the dump again"):
        f.load(dump)


@pytest.mark.parametrize("kind", ["standard", "sharded", "counting"])
def test_a_dump_streams_in_bounded_chunks_read_as_they_go(kind, request, redis_client):
    f = make(request, kind, "big", capacity=5000)
    pieces = f.dump(chunk_bytes=256)
    records = dumpfile.DumpReader(io.BytesIO(b"".join(pieces))).chunks()
    sizes = [len(data) for _part, _position, data in records]
    parts = f.layout.segments
    assert max(sizes) == 256 and sum(sizes) == sum(s.num_bytes for s in parts)
    assert len(sizes) == sum(-(-s.num_bytes // 256) for s in parts)
    lazy = f.dump(chunk_bytes=256)
    next(lazy), next(lazy)  # the header record: nothing of the bits read yet
    redis_client.delete(f.layout.segments[-1].keys.bits)  # each range checks its key
    with pytest.raises(FilterKeyMissing):
        list(lazy)


def damaged(dump: bytes) -> dict[str, bytes]:
    middle = bytearray(dump)
    middle[len(dump) // 2] ^= 0x40
    return {
        "a flipped bit": bytes(middle),
        "cut short": dump[: len(dump) * 2 // 3],
        "no end record": dump[: dump.rindex(b"E")],
        "not a dump": b"PK\x03\x04" + dump,
    }


@pytest.mark.parametrize("kind", ["standard", "blocked", "sharded", "counting", "native"])
def test_a_load_that_fails_changes_nothing(kind, request, redis_client, bf):
    f = make(request, kind, "live")
    client = bf if kind == "native" else redis_client
    dump = b"".join(f.dump(chunk_bytes=100))
    other = make(request, kind, "other")  # another hash key: its bits mean other items
    keys = [s.keys.bits for s in f.layout.segments]
    before = [client.dump(key) for key in keys]
    for what, bad in damaged(dump).items():
        with pytest.raises(DumpInvalid):
            f.load(bad)
        assert [client.dump(key) for key in keys] == before, what
        assert not client.exists(f.layout.segment.keys.lock), what
    with pytest.raises(IncompatibleFilters, match="hash key"):
        f.load(b"".join(other.dump()))
    assert [client.dump(key) for key in keys] == before


@pytest.mark.parametrize("kind", ["standard", "sharded", "counting", "native"])
def test_adds_made_while_a_dump_loads_are_kept(kind, request):
    f = make(request, kind, "busy")
    dump = b"".join(f.dump(chunk_bytes=64))
    late = [f"late-{i}" for i in range(5)]
    writer = django_bloom.get_filter("busy", refresh=True)

    def progress(done, total):  # runs while the build lock is held
        if late:
            writer.add(late.pop())

    f.load(dump, progress=progress)
    assert not late and all(f.contains_many([f"late-{i}" for i in range(5)]))
    assert holds_every_item(f)


def test_a_dump_without_its_key_loads_only_into_its_own_filter():
    f = django_bloom.create_filter("keyed", capacity=100)
    f.add_many(ITEMS[:50])
    dump = b"".join(f.dump(include_key=False))
    key = f.meta.hasher.partition("$")[2]
    assert key not in dump.decode("latin-1") and str(f.meta.seed) not in dump.decode("latin-1")
    with pytest.raises(IncompatibleFilters, match="leaves its hash key out"):
        load_filter("elsewhere", dump)
    f.clear()
    load_filter("keyed", dump)  # the same row: matched by fingerprint
    assert all(f.contains_many(ITEMS[:50]))
    apart = django_bloom.create_filter("apart", capacity=100)  # same geometry, its own key
    with pytest.raises(IncompatibleFilters, match="fingerprint"):
        apart.load(dump)


def test_a_family_is_not_merged(request):
    """(Every kind's merge or its refusal is the contract's.)"""
    a = make(request, "family", "a")
    b = load_filter("b", b"".join(a.dump()), cache_alias=a.meta.cache_alias)
    with pytest.raises(OperationNotSupported, match="families"):
        a.merge(b)


def test_a_merge_keeps_adds_made_meanwhile_and_warns_past_capacity(monkeypatch, caplog):
    from django_bloom import transfer
    from django_bloom.engine.storage import Storage

    a = django_bloom.create_filter("target", capacity=100)
    b = load_filter("source", b"".join(a.dump()))
    b.add_many(ITEMS)  # 3x a's capacity
    monkeypatch.setattr(transfer, "MERGE_CHUNK_BYTES", 16)
    real, added = Storage.or_range, []

    def or_then_add(storage, segment, start, data):  # another process's add between ranges
        real(storage, segment, start, data)
        added.append(f"meanwhile-{start}")
        threading.Thread(target=django_bloom.get_filter("target").add, args=(added[-1],)).run()

    monkeypatch.setattr(Storage, "or_range", or_then_add)
    with caplog.at_level("WARNING", logger="django_bloom.capacity"):
        stats = a.merge(b)
    assert len(added) > 5 and all(a.contains_many(added + ITEMS))
    assert stats.capacity_used > 2 and "past its capacity" in caplog.text


def test_a_dump_moves_to_another_redis_and_to_a_cluster_and_back(
    redis_cluster, private_redis, cache_alias, settings
):
    settings.DJANGO_BLOOM = {**settings.DJANGO_BLOOM, "CLUSTERS": {"cl": redis_cluster.url}}
    other = cache_alias("other", private_redis())
    sharded = django_bloom.create_filter(
        "spread", capacity=2000, layout="sharded", options={"segments": 4}
    )
    plain = django_bloom.create_filter("plain", capacity=2000, layout="blocked")
    counting = django_bloom.create_filter("counted", capacity=100, layout="counting")
    for f in (sharded, plain):
        f.add_many(ITEMS)
        dump = b"".join(f.dump(chunk_bytes=100))
        assert all(load_filter(f"{f.name}-moved", dump, cache_alias=other).contains_many(ITEMS))
        there = load_filter(f"{f.name}-cl", dump, cache_alias="cl")
        assert all(there.contains_many(ITEMS))
        there.add("added-on-the-cluster")
        f.clear()
        f.load(b"".join(there.dump(chunk_bytes=100)))  # back, in place
        assert all(f.contains_many([*ITEMS, "added-on-the-cluster"]))
        f.add("then-here")
        assert there.merge(f).bits_set and there.contains("then-here")  # across servers
    segments = get_handle("spread-cl").layout.segments
    nodes = {redis_cluster.server_of(s.keys.bits).port for s in segments}
    assert len(nodes) > 1  # the segments spread over the masters
    with pytest.raises(ValueError, match="Redis Cluster"):
        load_filter("counted-cl", b"".join(counting.dump()), cache_alias="cl")
