"""The layout protocol's proof: a third layout, defined HERE only (not shipped),
registered through the registry alone, answers through the public API against
the real Redis: adds, batches, the local mirror, rebuild, resize, stats. It opts into
the capabilities it uses (Rebuildable, Mirrorable, Planned) by inheriting them."""

import math

import pytest
from django.test import override_settings

import django_bloom
from django_bloom.engine import hashing, sizing
from django_bloom.engine.kinds import Layout, layout_names, register_layout, unregister_layout
from django_bloom.engine.kinds.capabilities import Mirrorable, Planned, Rebuildable
from django_bloom.exceptions import FilterKeyMissing

pytestmark = pytest.mark.django_db

MASK64 = (1 << 64) - 1


class DoubleHashingLayout(Layout, Rebuildable, Mirrorable, Planned):
    """Plain double hashing, g_i = (h1 + i * h2) mod m: no cubic term, nothing else."""

    layout_name = "test-double"

    @classmethod
    def geometry(cls, capacity, error_rate, options=None):
        num_bits = sizing.optimal_num_bits(capacity, error_rate)
        return num_bits, sizing.optimal_num_hashes(num_bits, capacity)

    def positioner(self):
        m, k = self.segment.num_bits, self.segment.num_hashes

        def positions(h1, h2):
            return [((h1 + i * h2) & MASK64) % m for i in range(k)]

        return positions

    def position_array(self, digests):
        np = hashing.numpy_module()
        both = np.frombuffer(digests, dtype="<u8").reshape(-1, 2)
        i = np.arange(self.segment.num_hashes, dtype=np.uint64)
        with np.errstate(over="ignore"):
            m = np.uint64(self.segment.num_bits)
            return ((both[:, 0:1] + i * both[:, 1:2]) % m).reshape(-1)


@pytest.fixture(autouse=True)
def double_layout():
    register_layout(DoubleHashingLayout)
    yield
    unregister_layout(DoubleHashingLayout.layout_name)


ITEMS = [f"member-{i}" for i in range(2000)]
STRANGERS = [f"stranger-{i}" for i in range(5000)]


def expected_bitmap(f, items):
    """The bits the layout's formula gives, computed here from the digests alone."""
    m, k = f.meta.num_bits, f.meta.num_hashes
    bitmap = bytearray((m + 7) // 8)
    for h1, h2 in hashing.pairs_of(f.hasher.item_digests(items)):
        for i in range(k):
            g = ((h1 + i * h2) & MASK64) % m
            bitmap[g >> 3] |= 0x80 >> (g & 7)
    return bytes(bitmap)


def stored_bitmap(redis_client, f):
    return redis_client.getrange(f.layout.segment.keys.bits, 0, f.layout.segment.num_bytes - 1)


@pytest.mark.parametrize("hasher", ["blake2b", "murmur3"])
def test_a_layout_registered_in_a_test_module_works_through_the_public_api(
    redis_client, bloom_prefix, hasher
):
    assert "test-double" in layout_names()
    f = django_bloom.create_filter(
        "third", capacity=2000, error_rate=0.01, layout="test-double", hasher=hasher
    )
    assert f.meta.layout == "test-double"
    assert (f.meta.num_bits, f.meta.num_hashes) == (19_171, 7)
    assert f.add("member-0") is True and f.add("member-0") is False
    for item in ITEMS[1:100]:
        f.add(item)
    f.add_many(ITEMS[100:])
    # The engine set exactly the bits the layout's formula names.
    assert stored_bitmap(redis_client, f) == expected_bitmap(f, ITEMS)
    assert all(f.contains_many(ITEMS)) and all(f.contains(i) for i in ITEMS[:50])
    probes = ITEMS[::5] + STRANGERS
    batch = f.contains_many(probes)
    assert [f.contains(p) for p in probes] == batch
    assert 0 < sum(batch[400:]) < 0.03 * len(STRANGERS)  # some false positives, not many

    by_add = stored_bitmap(redis_client, f)
    assert f.rebuild(ITEMS) == len(ITEMS)  # in-process build through the layout's builder
    assert stored_bitmap(redis_client, f) == by_add
    stats = f.stats()
    assert stats.bits_set == sum(bin(b).count("1") for b in by_add)
    assert math.isclose(stats.estimated_items, len(ITEMS), rel_tol=0.05)

    with override_settings(DJANGO_BLOOM={"KEY_PREFIX": bloom_prefix, "MIRROR_FILTERS": ["third"]}):
        mirrored = django_bloom.get_filter("third")
        assert mirrored._mirror() is not None
        assert mirrored.contains_many(probes) == batch
        assert [mirrored.contains(p) for p in probes[:300]] == batch[:300]


def test_the_third_layout_resizes_and_keeps_the_guarantees(redis_client):
    f = django_bloom.create_filter("third-resize", capacity=500, layout="test-double")
    f.add_many(ITEMS[:500])
    f.rebuild(ITEMS, capacity=4000)
    assert (f.meta.num_bits, f.meta.num_hashes) == DoubleHashingLayout.geometry(4000, 0.01)
    assert stored_bitmap(redis_client, f) == expected_bitmap(f, ITEMS)
    assert all(django_bloom.get_filter("third-resize").contains_many(ITEMS))
    redis_client.delete(f.layout.segment.keys.bits)
    with pytest.raises(FilterKeyMissing):  # a lost key is never "absent"
        f.contains("member-1")


def test_an_unregistered_layout_is_refused():
    unregister_layout("test-double")
    with pytest.raises(ValueError, match="unknown layout 'test-double'"):
        django_bloom.create_filter("third-gone", capacity=100, layout="test-double")
