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


def test_a_rotating_window_written_by_the_previous_release_answers_as_before(
    redis_client, bloom_prefix
):
    """The release before issue 34 picked the slice from the server's clock and kept no
    header: its control key (trailer, then W + 2 u32 slots naming the slices it created)
    and its slice (bitmap, trailer, an EXPIREAT) are read as they are, written into, and
    the window goes on from the slice they name."""
    w, s = 3, 3600
    row = BloomFilter.objects.create(
        name="legacy-window", capacity=1500, error_rate=0.01, layout="rotating", seed=SEED,
        hasher="murmur3", generation="", options={"slices": w, "slice_seconds": s},
    )  # fmt: skip
    m, k = row.num_bits, row.num_hashes
    base = mmh3.hash(f"django-bloom|1|{m}|{k}|{SEED}|rotating".encode(), 0, signed=False) or 1
    fp = mmh3.hash(f"{base}|rotating|{w}|{s}".encode(), 0, signed=False) or 1
    epoch = int(redis_client.time()[0]) // s
    bitmap = bytearray((m + 7) // 8)
    for item in ITEMS[:200]:
        for g in item_positions(row, item):
            bitmap[g >> 3] |= 0x80 >> (g & 7)
    trailer = struct.pack(">IB3xq", fp, 0, 0)
    control = f"{bloom_prefix}:{{{row.name}}}:v1:bits"
    record = bytearray(4 * (w + 2))
    record[4 * (epoch % (w + 2)) : 4 * (epoch % (w + 2)) + 4] = struct.pack(">I", epoch)
    redis_client.set(control, trailer + bytes(record))
    slice_key = f"{bloom_prefix}:{{{row.name}}}:v1:slice:{epoch}"
    redis_client.set(slice_key, bytes(bitmap) + trailer)
    redis_client.expireat(slice_key, (epoch + w + 2) * s)

    f = django_bloom.get_filter(row.name)
    assert f.layout.segment.fingerprint == fp and f.layout.window.control_key == control
    assert f.contains_many(ITEMS[:200]) == [True] * 200
    assert f.add(ITEMS[0]) is False and f.add("brand-new") is True
    assert sorted(redis_client.scan_iter(match=f.layout.window.slice_pattern)) == [
        slice_key.encode()
    ]  # the old slice is the current one: written into, not beside it
    assert redis_client.get(control)[: len(trailer) + len(record)][:4] == trailer[:4]
    assert f.contains_many([*ITEMS[:200], "brand-new"]) == [True] * 201
