"""Every path gives the same answers, and the bulk path writes the same bits."""

import pytest
from django.test import override_settings

import django_bloom
from django_bloom.engine import mirror
from tests.bare_layouts import bare_layout, layout_bitmap

pytestmark = pytest.mark.django_db

ITEMS = [f"member-{i}" for i in range(3000)]
PROBES = ITEMS[::3] + [f"stranger-{i}" for i in range(20_000)]


def bitmap(redis_client, f):
    return redis_client.getrange(f.layout.segment.keys.bits, 0, f.layout.segment.num_bytes - 1)


@pytest.mark.parametrize("hasher", ["blake2b", "murmur3"])
def test_bulk_rebuild_is_bit_for_bit_equal_to_adds(redis_client, hasher):
    # over-full on purpose
    f = django_bloom.create_filter("agree", capacity=2000, error_rate=0.01, hasher=hasher)
    for item in ITEMS[:100]:
        f.add(item)
    f.add_many(ITEMS[100:])
    by_add = bitmap(redis_client, f)
    f.rebuild(ITEMS)
    by_bulk = bitmap(redis_client, f)
    assert by_add == by_bulk
    assert by_add.count(b"\0") < len(by_add)


@pytest.mark.parametrize("hasher", ["blake2b", "murmur3"])
def test_single_batch_and_mirror_answer_alike(bloom_prefix, hasher):
    f = django_bloom.create_filter("agree", capacity=2000, error_rate=0.05, hasher=hasher)
    f.add_many(ITEMS)
    batch = f.contains_many(PROBES)
    single = [f.contains(p) for p in PROBES[:3000]]
    assert single == batch[:3000]
    assert all(batch[: len(ITEMS[::3])])  # members: never a false "absent"
    assert any(batch[len(ITEMS[::3]) :])  # over capacity: some false positives exist...
    with override_settings(DJANGO_BLOOM={"KEY_PREFIX": bloom_prefix, "MIRROR_FILTERS": ["agree"]}):
        g = django_bloom.get_filter("agree")
        assert mirror.mirror_for(g) is not None
        assert g.contains_many(PROBES) == batch  # ...and the mirror reproduces them exactly


def test_numpy_and_pure_python_builds_are_identical():
    from django_bloom.engine import hashing

    pytest.importorskip("numpy", reason="numpy is in the test extra; this must not skip in CI")
    items = [f"n{i}" for i in range(30_000)] + [b"\x00bytes", 12345, "ünïcode"]
    digests = hashing.item_digests(items, 4242)
    pairs = hashing.pairs_of(digests)
    assert pairs == [hashing.hash_pair(hashing.item_bytes(i), 4242) for i in items]
    for m, k in [(287_552, 7), (1_000_003, 10), (17, 2)]:
        layout = bare_layout("standard", m, k)
        fast = layout_bitmap(layout, digests, use_numpy=True)
        assert fast == layout_bitmap(layout, digests, use_numpy=False)
        flat = hashing.positions_of(pairs, layout.positioner())
        assert layout.position_array(digests).tolist() == flat


def test_lone_surrogate_is_refused_not_a_crash():
    from django_bloom.engine import hashing

    with pytest.raises(ValueError):
        hashing.item_digests(["fine", "\ud800"], 1)  # mmh3 itself would segfault on this str
