"""Pure math and hashing: no Redis, no database."""

import math

import mmh3
import pytest

from django_bloom.engine import hashing, sizing
from django_bloom.engine.kinds import layout_class
from tests.bare_layouts import bare_layout, layout_bitmap


@pytest.mark.parametrize(
    "n, p, m, k",
    [
        (1_000_000, 0.01, 9_585_059, 7),
        (1_000, 0.01, 9_586, 7),
        (100_000, 0.001, 1_437_759, 10),
        (10_000, 0.1, 47_926, 3),
        (1, 0.5, 2, 1),
        (10, 0.9, 3, 1),  # k is never below 1
    ],
)
def test_sizing_values(n, p, m, k):
    assert sizing.optimal_num_bits(n, p) == m
    assert sizing.optimal_num_hashes(m, n) == k


def test_sizing_formula_matches_definition_across_range():
    for n in (1, 7, 1000, 123_457, 10**9):
        for p in (0.5, 0.1, 0.01, 1e-3, 1e-6):
            m = sizing.optimal_num_bits(n, p)
            assert m == math.ceil(-n * math.log(p) / math.log(2) ** 2)
            assert sizing.optimal_num_hashes(m, n) == max(1, round(m / n * math.log(2)))


@pytest.mark.parametrize(
    "capacity, error_rate, exc",
    [
        (0, 0.01, ValueError),
        (-5, 0.01, ValueError),
        (10, 0, ValueError),
        (10, 1, ValueError),
        (10, 1.5, ValueError),
        (10, -0.1, ValueError),
        (10, float("nan"), ValueError),
        ("10", 0.01, TypeError),
        (10.0, 0.01, TypeError),
        (True, 0.01, TypeError),
        (10, "0.01", TypeError),
    ],
)
def test_bad_sizing_is_refused(capacity, error_rate, exc):
    with pytest.raises(exc):
        sizing.optimal_num_bits(capacity, error_rate)


def test_expected_fpr_at_design_capacity_is_close_to_target():
    for p in (0.1, 0.01, 0.001):
        m = sizing.optimal_num_bits(100_000, p)
        k = sizing.optimal_num_hashes(m, 100_000)
        assert p * 0.95 < sizing.expected_fpr(m, 100_000, k) < p * 1.05
    assert sizing.expected_fpr(1000, 0, 3) == 0.0


def test_estimate_and_fill_fpr():
    m, k = 10_000, 5
    assert sizing.estimate_items(m, k, 0) == 0
    assert sizing.estimate_items(m, k, m) == math.inf
    # X = m(1 - e^{-kn/m}) for n = 1000 inverts to 1000.
    x = m * (1 - math.exp(-k * 1000 / m))
    assert sizing.estimate_items(m, k, x) == pytest.approx(1000)
    assert sizing.fill_fpr(m, m // 2, k) == pytest.approx(0.5**5)


def test_item_encoding():
    assert hashing.item_bytes("é") == "é".encode()
    assert hashing.item_bytes(b"\x00\xff") == b"\x00\xff"
    assert hashing.item_bytes(bytearray(b"ab")) == b"ab"
    assert hashing.item_bytes(42) == hashing.item_bytes("42") == b"42"
    assert hashing.item_bytes(-7) == b"-7"
    assert hashing.item_bytes((1, 2), encoder=lambda t: f"{t[0]}:{t[1]}") == b"1:2"


@pytest.mark.parametrize("bad", [None, True, 1.5, [1], {"a": 1}, object()])
def test_unsupported_items_raise_type_error(bad):
    with pytest.raises(TypeError):
        hashing.item_bytes(bad)


def test_lone_surrogate_is_a_clear_value_error():
    with pytest.raises(ValueError, match="Unicode"):
        hashing.item_bytes("\ud800")


def test_hash_pair_is_the_two_halves_of_murmur3_x64_128():
    h = mmh3.hash128(b"hello", 1234, x64arch=True, signed=False)
    assert hashing.hash_pair(b"hello", 1234) == (h & hashing.MASK64, h >> 64)


def test_positions_follow_documented_enhanced_double_hashing():
    m, k, seed = 1_000_003, 7, 99
    h1, h2 = hashing.hash_pair(b"item", seed)
    expected = [((h1 + i * h2 + (i**3 - i) // 6) % 2**64) % m for i in range(k)]
    assert hashing.standard_positioner(m, k)(h1, h2) == expected
    assert all(0 <= g < m for g in expected)


def test_seed_changes_bit_pattern():
    positions = hashing.standard_positioner(10_000_000, 7)
    a = positions(*hashing.hash_pair(b"same", 1))
    b = positions(*hashing.hash_pair(b"same", 2))
    assert set(a) != set(b)


def test_in_process_bitmap_uses_redis_bit_order():
    bitmap = bytearray(2)
    hashing.set_bits(bitmap, [0, 9])
    assert bitmap == bytearray([0b1000_0000, 0b0100_0000])
    probe = hashing.prober_of(lambda h1, h2: [h1, h2])  # the probe reads the same order
    assert probe(0, 9, bitmap) and not probe(0, 1, bitmap)


@pytest.mark.parametrize("kind", ["standard", "blocked"])
def test_prober_answers_like_the_positions_it_stops_early_on(kind):
    m, k = layout_class(kind).geometry(1500, 0.05)  # full: ~5% false positives
    digests = hashing.item_digests([f"p{i}" for i in range(3000)], 7)
    pairs = hashing.pairs_of(digests)
    layout = bare_layout(kind, m, k)
    bitmap = layout_bitmap(layout, digests[: 16 * 1500], use_numpy=False)
    positions = layout.positioner()
    probe = layout.prober()
    want = [all(bitmap[g >> 3] & (0x80 >> (g & 7)) for g in positions(*p)) for p in pairs]
    assert [probe(h1, h2, bitmap) for h1, h2 in pairs] == want
    assert all(want[:1500]) and 20 < sum(want[1500:]) < 200  # added items; false positives
