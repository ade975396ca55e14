"""Sharded filters on one server: S segments, each its own key and hash tag; an item's
bits all in one segment; batches one round trip; lost segments detected; rebuild."""

import pytest
from django.test import override_settings

import django_bloom
from django_bloom.engine import hashing
from django_bloom.engine.kinds.sharded import ShardedLayout, segment_bits, segment_of
from django_bloom.exceptions import FilterKeyMissing
from django_bloom.models import BloomFilter

pytestmark = pytest.mark.django_db


def make(name="s", capacity=5000, segments=4, **kwargs):
    return django_bloom.create_filter(
        name, capacity=capacity, layout="sharded", options={"segments": segments}, **kwargs
    )


def test_segments_are_keys_with_distinct_hash_tags(redis_client, bloom_prefix):
    f = make(segments=4)
    keys = sorted(k.decode() for k in redis_client.scan_iter(match=f"{bloom_prefix}:*"))
    tags = {k.split("{", 1)[1].split("}", 1)[0] for k in keys}
    assert len(tags) == 4 and "s" in tags
    assert {t.split(".")[0] for t in tags} == {"s", "s/1", "s/2", "s/3"}
    each = segment_bits(f.meta.num_bits, 4)
    assert all(redis_client.strlen(k) == each // 8 + 16 for k in keys)
    assert f.layout.num_bits == 4 * each >= f.meta.num_bits


@pytest.mark.parametrize("count", [3, 4, 12, 64])
def test_segments_take_one_share_each_of_the_cluster_slots(count):
    from redis.crc import key_slot

    from django_bloom.engine.kinds.sharded import segment_names

    names = segment_names("some-filter", count)
    assert names[0] == "some-filter" and len(set(names)) == count
    shares = sorted(key_slot(n.encode()) * count // 16384 for n in names)
    assert shares == list(range(count))  # so 3 equal masters hold count/3 each
    assert segment_names("some-filter", count) == names  # deterministic


def test_an_items_bits_are_in_one_segment_chosen_by_its_digest(bloom_prefix):
    f = make(segments=5)
    layout = f.layout
    digests = f.hasher.item_digests([f"i{n}" for n in range(400)], None)
    flat = layout.positions(digests)
    pure = hashing.positions_of(hashing.pairs_of(digests), layout.positioner())
    assert list(flat) == pure  # numpy and Python agree
    k, m = layout.segment.num_hashes, layout.segment_bits
    seen = set()
    for n, (h1, _h2) in enumerate(hashing.pairs_of(digests)):
        item = pure[n * k : (n + 1) * k]
        assert {g // m for g in item} == {segment_of(h1, 5)}
        seen.add(segment_of(h1, 5))
    assert seen == set(range(5))


def test_a_batch_is_one_round_trip_over_all_segments(sent_commands, bloom_prefix):
    f = make(segments=4)
    sent_commands.clear()
    f.contains_many([f"q-{i}" for i in range(200)])
    assert len(sent_commands) == 1
    assert all(seg.keys.bits.encode() in sent_commands[0] for seg in f.layout.segments)
    sent_commands.clear()
    f.add_many([f"q-{i}" for i in range(200)])
    assert len(sent_commands) == 1


def test_a_single_item_is_one_command_to_one_segment(sent_commands, bloom_prefix):
    f = make(segments=4)
    sent_commands.clear()
    f.add("one")
    f.contains("one")
    assert len(sent_commands) == 2
    assert all(c.count(b"BITFIELD") == 1 for c in sent_commands)


@pytest.mark.parametrize("op", ["contains", "contains_many", "add_many"])
def test_a_lost_segment_raises_instead_of_answering_absent(redis_client, bloom_prefix, op):
    f = make(segments=4)
    items = [f"a-{i}" for i in range(200)]
    f.add_many(items)
    lost = f.layout.segments[2].keys.bits
    redis_client.delete(lost)
    with pytest.raises(FilterKeyMissing):
        if op == "contains":
            for item in items:  # the items of segment 2 raise
                f.contains(item)
        else:
            getattr(f, op)(items)
    assert not redis_client.exists(lost)  # a refused write leaves no stray key


def test_writes_during_a_sharded_rebuild_are_not_lost(bloom_prefix):
    f = make(capacity=10_000, segments=4)
    writer = django_bloom.get_filter("s")
    late = [f"late-{i}" for i in range(30)]

    def progress(done):
        for item in late[:10]:
            writer.add(item)
        writer.add_many(late[10:])
        writer.add_many([f"bulk-late-{i}" for i in range(3000)])

    f.rebuild((f"src-{i}" for i in range(5000)), progress=progress)
    g = django_bloom.get_filter("s", refresh=True)
    assert all(g.contains_many(late))
    assert all(g.contains_many([f"bulk-late-{i}" for i in range(3000)]))
    assert all(g.contains_many([f"src-{i}" for i in range(5000)]))
    assert not g.build_running()
    result = g.layout.add(g.storage, g._digest_one("after")[1])
    assert result.rebuilding is False  # no segment keeps the REBUILDING flag


def test_a_standard_filter_too_big_for_one_segment_gets_just_enough_segments(
    redis_client, bloom_prefix
):
    """(The contract: it becomes what ``oversize`` says and keeps every item.)"""
    with override_settings(DJANGO_BLOOM={"KEY_PREFIX": bloom_prefix, "MAX_SEGMENT_BYTES": 4096}):
        django_bloom.create_filter("big", capacity=20_000, error_rate=0.01)
        row = BloomFilter.objects.get(name="big")
        assert row.options["segments"] == -(-((row.num_bits + 7) // 8) // 4096)
        # Explicit segments that are too few: refused, with nothing written.
        with pytest.raises(ValueError, match="sharded"):
            make("few", capacity=20_000, segments=2)
        assert not list(redis_client.scan_iter(match=f"{bloom_prefix}:*few*"))


def test_admin_detail_page_shows_the_segment_count_and_summed_memory(admin_client):
    from django.urls import reverse

    f = make(segments=3)
    f.add_many([f"adm-{i}" for i in range(100)])
    html = admin_client.get(
        reverse("admin:django_bloom_bloomfilter_change", args=[f.meta.pk])
    ).content.decode()
    assert "segments (Redis keys)" in html
    stats = f.stats()
    assert stats.segments == 3 and stats.memory_bytes >= stats.key_bytes
    plain = django_bloom.create_filter("plain", capacity=100)
    html = admin_client.get(
        reverse("admin:django_bloom_bloomfilter_change", args=[plain.meta.pk])
    ).content.decode()
    assert "segments (Redis keys)" not in html


def test_verify_finds_and_repairs_bits_zeroed_in_one_segment(redis_client, bloom_prefix):
    from django_bloom.ops import verify
    from tests.testapp.models import Account

    users = [f"user{i}" for i in range(3000)]
    Account.objects.bulk_create(Account(username=u, email=f"{u}@example.org") for u in users)
    f = django_bloom.create_filter(
        "usernames", capacity=5000, source="testapp.Account.username",
        layout="sharded", options={"segments": 3},
    )  # fmt: skip
    f.rebuild(users)
    assert verify.verify_filter("usernames", chunk_bytes=1000, pause=0).ok
    key = f.layout.segments[2].keys.bits
    before = redis_client.getrange(key, 0, -1)
    redis_client.setrange(key, 100, bytes(300))  # trailer kept: nothing else notices
    assert not all(f.contains_many(users))
    report = verify.verify_filter("usernames", chunk_bytes=1000, pause=0)
    lost = sum(bin(b).count("1") for b in before[100:400])
    assert report.bits_missing == lost > 0
    seg = f.layout.segments[0].num_bytes
    assert 2 * seg + 100 <= report.first_offsets[0] < 2 * seg + 400
    assert verify.verify_filter("usernames", repair=True, pause=0).bits_repaired == lost
    assert all(f.contains_many(users))
    assert redis_client.getrange(key, 0, -17) == before[:-16]


def test_a_bitmap_above_the_numpy_bool_limit_is_built_packed_bit_for_bit(monkeypatch):
    from django_bloom.engine import hashing as h
    from django_bloom.engine.kinds import Segment
    from django_bloom.engine.kinds.base import RowParams

    segment = Segment(
        name="pk", alias="default", prefix="x", num_bits=50_000, num_hashes=7, fingerprint=5
    )
    f_layout = ShardedLayout.bind(segment, RowParams({"segments": 3}))
    digests = h.item_digests([f"p{i}" for i in range(3000)], 7)
    with monkeypatch.context() as no_numpy:  # as where numpy is not installed
        no_numpy.setattr(h, "numpy_module", lambda: None)
        plain = f_layout.builder()
    plain.add(digests)
    monkeypatch.setattr(h, "NUMPY_MAX_BITS", 1000)  # force the packed path
    packed = f_layout.builder()
    assert packed.packed is not None
    packed.add(digests[: 16 * 1000])
    packed.add(digests[16 * 1000 :])
    assert bytes(packed.tobytes()) == bytes(plain.tobytes())


def test_bloom_commands_work_on_a_sharded_filter():
    import io
    import json

    from django.core.management import call_command

    make(segments=3)
    call_command("bloom", "add", "s", "one", "two", stdout=io.StringIO())
    call_command("bloom", "check", "s", "one", stdout=io.StringIO())  # exit 0: present
    with pytest.raises(SystemExit) as absent:
        call_command("bloom", "check", "s", "never-added-item", stdout=io.StringIO())
    assert absent.value.code == 1
    out = io.StringIO()
    call_command("bloom", "stats", "s", "--json", stdout=out)
    data = json.loads(out.getvalue())
    row = data[0] if isinstance(data, list) else data
    assert row["segments"] == 3 and row["bits_set"] > 0
    call_command("bloom", "measure", "s", stdout=io.StringIO())
