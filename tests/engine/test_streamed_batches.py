"""Large batches are hashed chunk by chunk and each chunk's commands sent as it is made.

The answers must be exactly those of the whole-batch path (item order, chunk
boundaries, the trailer check of every command), bad input must still write
nothing, and the batch is still one send and one round trip.
"""

import pytest

import django_bloom
from django_bloom.conf import get_config
from django_bloom.engine.transport import packing
from django_bloom.exceptions import FilterKeyMissing

pytestmark = pytest.mark.django_db

LAYOUTS = ["standard", "blocked"]


def make(layout, name="streamed", capacity=50_000):
    return django_bloom.create_filter(name, capacity=capacity, error_rate=0.01, layout=layout)


def test_chunks_cover_the_batch_in_order_and_end_small():
    size = get_config()["BATCH_STREAM_ITEMS"]
    for count in (size + 1, 1000, 4321):
        chunks = packing.stream_chunks(count, size)
        assert chunks[0][0] == 0 and chunks[-1][1] == count
        assert all(a[1] == b[0] for a, b in zip(chunks, chunks[1:], strict=False))
        assert all(stop - start <= size for start, stop in chunks)
        assert chunks[-1][1] - chunks[-1][0] == packing.STREAM_LAST_ITEMS


def model_was_new(f, items, bitmap: bytearray) -> list[bool]:
    """What an add of ``items`` must answer, item after item, on a local copy of the bits."""
    flat = [int(g) for g in f.layout.positions(f.hasher.item_digests(items))]  # numpy: ints
    k, out = f.layout.segment.num_hashes, []
    for i in range(0, len(flat), k):
        bits = flat[i : i + k]
        out.append(any(not bitmap[g >> 3] & (0x80 >> (g & 7)) for g in bits))
        for g in bits:
            bitmap[g >> 3] |= 0x80 >> (g & 7)
    return out


@pytest.mark.parametrize("layout", LAYOUTS)
def test_streamed_batches_answer_as_the_whole_batch_path(layout, settings):
    f = make(layout)
    items = [f"user-{i}@example.org" for i in range(1500)]
    probes = items[::3] + [f"absent-{i}" for i in range(1000)]
    bitmap = bytearray(f.layout.segment.num_bytes)

    assert f.add_many(items[:1000]) == model_was_new(f, items[:1000], bitmap)
    assert f.add_many(items) == model_was_new(f, items, bitmap)
    streamed = f.contains_many(probes)

    settings.DJANGO_BLOOM = {**settings.DJANGO_BLOOM, "BATCH_STREAM_ITEMS": 0}  # one chunk
    assert f.contains_many(probes) == streamed
    assert streamed[:500] == [True] * 500  # every added item is present
    assert streamed == [f.contains(p) for p in probes]  # and one by one agrees
    assert f.add_many(probes[500:]) == model_was_new(f, probes[500:], bitmap)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_a_bad_item_late_in_a_streamed_batch_writes_nothing(layout, redis_client):
    f = make(layout)
    items = [f"ok-{i}" for i in range(999)] + [None]
    with pytest.raises(TypeError):
        f.add_many(items)
    assert redis_client.bitcount(f.layout.segment.keys.bits, 0, f.layout.segment.num_bytes - 1) == 0
    assert not any(f.contains_many(items[:999]))


def test_a_streamed_batch_is_one_send_of_several_commands(sent_commands):
    f = make("standard")
    items = [f"i{i}" for i in range(1000)]
    sent_commands.clear()
    f.add_many(items)
    f.contains_many(items)
    assert len(sent_commands) == 2
    commands = len(packing.stream_chunks(1000, get_config()["BATCH_STREAM_ITEMS"]))
    assert sent_commands[0].count(b"\r\nBITFIELD\r\n") == commands
    assert sent_commands[1].count(b"\r\nBITFIELD_RO\r\n") == commands


@pytest.mark.parametrize("layout", LAYOUTS)
def test_a_lost_key_is_reported_not_absent_by_a_streamed_batch(layout, redis_client):
    f = make(layout)
    f.add_many([f"i{i}" for i in range(1000)])
    redis_client.delete(f.layout.segment.keys.bits)
    with pytest.raises(FilterKeyMissing):
        f.contains_many([f"i{i}" for i in range(1000)])
    with pytest.raises(FilterKeyMissing):
        f.add_many([f"j{i}" for i in range(1000)])
    # the refused write left no stray key
    assert not redis_client.exists(f.layout.segment.keys.bits)


def test_a_layout_with_its_own_contains_gets_the_batch_whole(sent_commands):
    """The one-word layout overrides ``contains``: one command, as before streaming."""
    f = make("blocked")
    items = [f"i{i}" for i in range(1000)]
    sent_commands.clear()
    assert f.contains_many(items) == [False] * 1000
    assert len(sent_commands) == 1
    assert sent_commands[0].count(b"\r\nBITFIELD_RO\r\n") == 1
