"""A key written by the previous release is read, and written, exactly as before.

The key is made here by hand from the documented format v1 (hashing.py,
engine/format.py), not by the code under test: legacy key name (no
generation), MurmurHash3 with the row's seed, the trailer's fingerprint of
``django-bloom|format|m|k|seed|layout``, for the standard and the one-word
("blocked") layout."""

import struct

import mmh3
import pytest

import django_bloom
from django_bloom.models import BloomFilter

pytestmark = pytest.mark.django_db

MASK64 = (1 << 64) - 1
SEED = 1234567
ITEMS = [f"old-{i}" for i in range(1500)]
STRANGERS = [f"new-{i}" for i in range(4000)]


def positions(layout, m, k, h1, h2):
    if layout == "blocked":
        base = (h1 % (m // 64)) << 6
        return [base | ((h2 >> (6 * i)) & 63) for i in range(k)]
    return [((h1 + i * h2 + (i**3 - i) // 6) & MASK64) % m for i in range(k)]


def item_positions(row, item):
    h1, h2 = mmh3.hash64(item.encode(), SEED, signed=False)
    return positions(row.layout, row.num_bits, row.num_hashes, h1, h2)


def write_previous_release_key(redis_client, prefix, row, items):
    m, k = row.num_bits, row.num_hashes
    bitmap = bytearray((m + 7) // 8)
    for item in items:
        for g in item_positions(row, item):
            bitmap[g >> 3] |= 0x80 >> (g & 7)
    text = f"django-bloom|1|{m}|{k}|{SEED}|{row.layout}"
    fingerprint = mmh3.hash(text.encode(), 0, signed=False) or 1
    key = f"{prefix}:{{{row.name}}}:v1:bits"
    redis_client.set(key, bytes(bitmap) + struct.pack(">IB3xq", fingerprint, 0, 41))
    return key, bitmap


@pytest.mark.parametrize("layout", ["standard", "blocked"])
def test_a_key_written_by_the_previous_release_answers_as_before(
    redis_client, bloom_prefix, layout
):
    row = BloomFilter.objects.create(
        name=f"legacy-{layout}",
        capacity=1500,
        error_rate=0.01,
        layout=layout,
        seed=SEED,
        hasher="murmur3",
        generation="",
    )
    key, bitmap = write_previous_release_key(redis_client, bloom_prefix, row, ITEMS)
    f = django_bloom.get_filter(row.name)
    assert f.layout.segment.keys.bits == key
    assert all(f.contains_many(ITEMS)) and all(f.contains(i) for i in ITEMS[:100])

    def by_hand(item):
        return all(bitmap[g >> 3] & (0x80 >> (g & 7)) for g in item_positions(row, item))

    expected = [by_hand(s) for s in STRANGERS]
    assert f.contains_many(STRANGERS) == expected
    assert [f.contains(s) for s in STRANGERS[:500]] == expected[:500]

    # Writes land on the previous release's bits: exactly the item's positions, counter + 1.
    fresh = next(s for s, hit in zip(STRANGERS, expected, strict=True) if not hit)
    assert f.add(fresh) is True
    for g in item_positions(row, fresh):
        bitmap[g >> 3] |= 0x80 >> (g & 7)
    stored = redis_client.get(key)
    assert stored[: len(bitmap)] == bytes(bitmap)
    assert struct.unpack(">IB3xq", stored[len(bitmap) :])[2] == 42
