"""The blocked layout: sizing, its false-positive rate, positions in one word, one word read
per item (the promises every kind keeps: tests/contract/)."""

import pytest

import django_bloom
from django_bloom.engine import hashing, sizing
from django_bloom.engine.kinds import blocked
from django_bloom.models import BloomFilter
from tests.bare_layouts import bare_layout, layout_bitmap

pytestmark = pytest.mark.django_db


def test_blocked_geometry_meets_the_rate_in_whole_words():
    m, k = blocked.blocked_geometry(1_000_000, 0.01)
    assert m % 64 == 0 and 1 <= k <= blocked.MAX_BLOCKED_HASHES
    assert blocked.blocked_fpr(m // 64, 1_000_000, k) <= 0.01
    assert blocked.blocked_fpr(m // 64 - 1, 1_000_000, k) > 0.01  # smallest such size
    standard, _ = sizing.standard_geometry(1_000_000, 0.01)
    assert (k, round(m / standard, 2)) == (3, 1.51)  # the memory it trades for speed


@pytest.mark.parametrize("p", [0.1, 0.01, 0.001, 1e-4])
def test_blocked_layout_takes_the_fewest_hashes_within_the_memory_slack(p):
    n = 1_000_000
    m, k = blocked.blocked_geometry(n, p)
    compact = min(blocked.blocked_words(n, p, j) for j in range(1, blocked.MAX_BLOCKED_HASHES + 1))
    assert m // 64 <= compact * blocked.BLOCKED_MEMORY_SLACK
    if k > 1:  # one hash fewer would cost more memory than the slack allows
        assert blocked.blocked_words(n, p, k - 1) > compact * blocked.BLOCKED_MEMORY_SLACK


@pytest.mark.parametrize("k", [3, 5, 8])
def test_blocked_fpr_formula_matches_a_simulation_with_repeated_bits(k):
    """Bits are drawn with replacement (a probe may test < k distinct bits): counted."""
    import numpy as np

    rng = np.random.default_rng(k)  # seeded: the same draw every run
    words, items, probes = 4000, 20_000 if k < 8 else 8_000, 2_000_000
    table = np.zeros(words, dtype=np.uint64)
    masks = np.bitwise_or.reduce(
        np.uint64(1) << rng.integers(0, 64, (items, k)).astype(np.uint64), axis=1
    )
    np.bitwise_or.at(table, rng.integers(0, words, items), masks)
    probe = np.bitwise_or.reduce(
        np.uint64(1) << rng.integers(0, 64, (probes, k)).astype(np.uint64), axis=1
    )
    simulated = ((table[rng.integers(0, words, probes)] & probe) == probe).mean()
    assert blocked.blocked_fpr(words, items, k) == pytest.approx(simulated, rel=0.05)


def test_standard_geometry_is_unchanged():
    assert sizing.standard_geometry(1_000_000, 0.01) == (9_585_059, 7)


def test_blocked_positions_stay_in_one_word_and_match_numpy():
    digests = hashing.item_digests([f"x{i}" for i in range(2000)], 99)
    m, k = blocked.blocked_geometry(2000, 0.01)
    layout = bare_layout("blocked", m, k)
    flat = hashing.positions_of(hashing.pairs_of(digests), layout.positioner())
    for start in range(0, len(flat), k):
        assert len({g >> 6 for g in flat[start : start + k]}) == 1
    assert layout.position_array(digests).tolist() == flat
    fast = layout_bitmap(layout, digests, use_numpy=True)
    assert fast == layout_bitmap(layout, digests, use_numpy=False)


@pytest.mark.parametrize("p", [0.1, 0.01, 0.001])
def test_blocked_measured_fpr_at_capacity_is_near_target(p):
    n = 20_000
    f = django_bloom.create_filter("blk-fpr", capacity=n, error_rate=p, layout="blocked")
    f.add_many([f"in-{i}" for i in range(n)])
    # >= 200 expected false positives even at p = 0.001, so the window is ~4 sigma wide
    probes = [f"out-{i}" for i in range(max(200_000, min(500_000, int(500 / p))))]
    rate = sum(f.contains_many(probes)) / len(probes)
    print(f"blocked layout, n={n}, p={p}, k={f.meta.num_hashes}: measured FPR {rate:.5f}")
    assert 0.5 * p < rate < 1.25 * p  # the foundation issue's window for the standard layout


def test_blocked_contains_reads_one_word_per_item(sent_commands):
    f = django_bloom.create_filter("blk-wire", capacity=1000, error_rate=0.01, layout="blocked")
    sent_commands.clear()
    f.contains_many([f"p{i}" for i in range(300)])
    f.contains("one")
    assert len(sent_commands) == 2
    assert sent_commands[0].count(b"$3\r\ni64\r\n") == 300
    assert sent_commands[1].count(b"$3\r\ni64\r\n") == 1
    assert b"$2\r\nu1\r\n" not in sent_commands[0] + sent_commands[1]


def test_unknown_layout_is_refused_and_writes_nothing(redis_client, bloom_prefix):
    with pytest.raises(ValueError, match="unknown layout"):
        django_bloom.create_filter("blk-bad", capacity=1000, layout="no-such-layout")
    assert not BloomFilter.objects.filter(name="blk-bad").exists()
    assert not list(redis_client.scan_iter(match=f"{bloom_prefix}:*"))


def test_a_row_sized_by_an_older_policy_keeps_its_geometry_when_saved(monkeypatch):
    """Sizing policy may change between releases; a saved row must keep matching its key."""
    today = blocked.blocked_geometry
    monkeypatch.setattr(
        blocked, "blocked_geometry", lambda n, p: today(n, p, slack=1.0)
    )  # the most compact
    f = django_bloom.create_filter("blk-old", capacity=2000, error_rate=0.01, layout="blocked")
    old = (f.meta.num_bits, f.meta.num_hashes)
    f.add_many([f"o{i}" for i in range(500)])
    monkeypatch.undo()
    assert blocked.blocked_geometry(2000, 0.01)[1] < old[1]  # today's policy: fewer hashes

    meta = BloomFilter.objects.get(name="blk-old")
    meta.description = "edited"
    meta.save()
    meta.refresh_from_db()
    assert (meta.num_bits, meta.num_hashes) == old
    again = django_bloom.get_filter("blk-old", refresh=True)
    assert all(again.contains_many([f"o{i}" for i in range(500)]))

    meta.capacity = 4000  # a real sizing change is still re-derived
    meta.save()
    assert (meta.num_bits, meta.num_hashes) == blocked.blocked_geometry(4000, 0.01)
