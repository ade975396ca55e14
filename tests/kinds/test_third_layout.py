"""The layout protocol's proof: a third layout, defined HERE only (not shipped),
registered through the registry alone, answers through the public API against the real
Redis. It opts into the capabilities it uses (Rebuildable, Mirrorable, Planned) by
inheriting them; tests/contract/test_a_new_kind.py runs it through the whole contract
(adds, batches, async, the mirror, rebuild, resize, stats, lost keys, bad input)."""


import pytest

import django_bloom
from django_bloom.engine import hashing, sizing
from django_bloom.engine.kinds import Layout, layout_names, register_layout, unregister_layout
from django_bloom.engine.kinds.capabilities import Mirrorable, Planned, Rebuildable

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
def test_the_engine_sets_exactly_the_bits_the_layouts_formula_names(redis_client, hasher):
    """What the contract (which runs this kind too: tests/contract/test_a_new_kind.py)
    cannot see: the bits in Redis are the layout's, by add, batch, rebuild and resize."""
    assert "test-double" in layout_names()
    f = django_bloom.create_filter(
        "third", capacity=2000, error_rate=0.01, layout="test-double", hasher=hasher
    )
    assert (f.meta.num_bits, f.meta.num_hashes) == (19_171, 7)
    for item in ITEMS[:100]:
        f.add(item)
    f.add_many(ITEMS[100:])
    assert stored_bitmap(redis_client, f) == expected_bitmap(f, ITEMS)
    assert f.rebuild(ITEMS) == len(ITEMS)  # in-process build through the layout's builder
    assert stored_bitmap(redis_client, f) == expected_bitmap(f, ITEMS)
    f.rebuild(ITEMS[:500], capacity=4000)
    assert (f.meta.num_bits, f.meta.num_hashes) == DoubleHashingLayout.geometry(4000, 0.01)
    assert stored_bitmap(redis_client, f) == expected_bitmap(f, ITEMS[:500])


def test_an_unregistered_layout_is_refused():
    unregister_layout("test-double")
    with pytest.raises(ValueError, match="unknown layout 'test-double'"):
        django_bloom.create_filter("third-gone", capacity=100, layout="test-double")
