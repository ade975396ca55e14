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


# -- any iterable, read chunk by chunk (BATCH_CHUNK_ITEMS): issue 30 ---------------------
CHUNK = 1000


@pytest.fixture
def small_chunks(settings):
    settings.DJANGO_BLOOM = {**settings.DJANGO_BLOOM, "BATCH_CHUNK_ITEMS": CHUNK}


def bits_of(redis_client, f) -> bytes:
    segment = f.layout.segment
    return redis_client.get(segment.keys.bits)[: segment.num_bytes]


@pytest.mark.parametrize("layout", [*LAYOUTS, "sharded"])
def test_a_generator_is_written_chunk_by_chunk_as_it_is_read(layout, redis_client, small_chunks):
    """Before: the generator was read whole (a list) before anything was sent."""
    options = {"options": {"segments": 3}} if layout == "sharded" else {}
    f = django_bloom.create_filter("gen", capacity=50_000, layout=layout, **options)
    segments = f.layout.segments
    written_when_read = {}

    def items():
        for i in range(3500):
            if i % CHUNK == 0:  # the first item of a chunk: the chunks before it are in Redis
                written_when_read[i] = sum(
                    redis_client.bitcount(s.keys.bits, 0, s.num_bytes - 1) for s in segments
                )
            yield f"gen-{i}"

    added = f.add_many(items())
    assert len(added) == 3500 and sum(added) > 3490  # new, but for a rare false positive
    assert written_when_read[0] == 0
    assert 0 < written_when_read[1000] < written_when_read[2000] < written_when_read[3000]
    assert f.contains_many(f"gen-{i}" for i in range(3500)) == [True] * 3500


def test_count_answers_how_many_and_holds_no_list(small_chunks):
    f = make("standard")
    assert f.add_many((f"c-{i}" for i in range(2500)), count=True) == 2500
    assert f.add_many((f"c-{i}" for i in range(2000, 3000)), count=True) == 500
    assert f.contains_many((f"c-{i}" for i in range(3000)), count=True) == 3000
    assert f.without_normalizer.contains_many(["c-1", "c-2"], count=True) == 2
    assert f.add_many([], count=True) == 0 and f.contains_many(iter([])) == []
    counting = make("counting", name="counted")
    counting.add_many(f"c-{i}" for i in range(1500))
    assert counting.remove_many((f"c-{i}" for i in range(1200)), count=True) == 1200


@pytest.mark.parametrize("layout", LAYOUTS)
def test_a_bad_item_in_a_later_chunk_says_which_items_were_written(
    layout, redis_client, small_chunks
):
    """Each chunk is validated before any of it is sent: the chunks before the bad
    item's are written (and the error says how many items), nothing of its own chunk."""
    f = make(layout)
    items = [f"ok-{i}" for i in range(2500)]
    with pytest.raises(TypeError) as failed:
        f.add_many(iter([*items, None, "never-read"]))
    assert "first 2,000 items were added, none from there on" in str(failed.value)
    assert "None cannot be a Bloom filter item" in str(failed.value)
    bitmap = bytearray(f.layout.segment.num_bytes)
    model_was_new(f, items[:2000], bitmap)
    assert bits_of(redis_client, f) == bytes(bitmap)  # chunks 1-2 exactly; nothing of chunk 3
    with pytest.raises(TypeError) as refused:  # the first chunk: nothing written, as before
        make(layout, name="fresh").add_many(iter([*items[:10], None]))
    assert "were added" not in str(refused.value)
    fresh = make(layout, name="listed")
    with pytest.raises(TypeError) as whole:  # a list of many chunks is validated whole first
        fresh.add_many([*items, None])
    assert "were added" not in str(whole.value)
    assert not any(bits_of(redis_client, fresh))


def test_a_stale_handle_heals_between_chunks_of_a_streamed_batch(small_chunks):
    """The filter is resized while a generator's batch runs: the chunk that finds the old
    key gone is retried on the new row's key, and so is every later chunk."""
    make("standard", capacity=5000)
    stale = django_bloom.get_filter("streamed")

    def items():
        for i in range(3500):
            if i == 1500:  # in the middle of chunk 2: chunk 1 is in the old key
                other = django_bloom.get_filter("streamed", refresh=True)
                other.rebuild([f"s-{j}" for j in range(1000)], capacity=20_000)
            yield f"s-{i}"

    assert len(stale.add_many(items())) == 3500
    live = django_bloom.get_filter("streamed", refresh=True)
    assert live.meta.capacity == 20_000 and stale.layout == live.layout
    assert live.contains_many(f"s-{i}" for i in range(3500)) == [True] * 3500


@pytest.mark.parametrize("layout", LAYOUTS)
def test_every_chunk_of_a_streamed_batch_is_journaled_during_a_rebuild(layout, small_chunks):
    f = make(layout, capacity=20_000)
    writer = django_bloom.get_filter("streamed")
    streamed = []

    def progress(done):
        if not streamed:  # the rebuild has its fresh key: a writer streams 3 chunks and more
            streamed.append(writer.add_many((f"late-{i}" for i in range(3500)), count=True))

    f.rebuild((f"src-{i}" for i in range(5000)), progress=progress)
    assert len(streamed) == 1 and streamed[0] > 3400  # new, but for a false positive or two
    g = django_bloom.get_filter("streamed", refresh=True)
    assert g.contains_many(f"late-{i}" for i in range(3500)) == [True] * 3500
    assert g.contains_many(f"src-{i}" for i in range(5000)) == [True] * 5000


def test_a_streamed_batch_is_one_send_per_chunk(sent_commands, small_chunks):
    f = make("standard")
    sent_commands.clear()
    f.add_many(f"i{i}" for i in range(3500))
    assert len(sent_commands) == 4  # 1000, 1000, 1000, 500
    assert all(b"\r\nBITFIELD\r\n" in sent for sent in sent_commands)


def test_a_native_batch_from_a_generator_is_written_chunk_by_chunk(native, bf, small_chunks):
    f = native("gen-native", capacity=50_000)
    seen = {}

    def items():
        for i in range(2500):
            if i % CHUNK == 0:
                seen[i] = bf.execute_command("BF.CARD", f.layout.segment.keys.bits)
            yield f"n-{i}"

    assert f.add_many(items(), count=True) == 2500
    assert seen[0] < seen[1000] < seen[2000]  # the sentinel, then each chunk's items
    assert f.contains_many((f"n-{i}" for i in range(2500)), count=True) == 2500


@pytest.mark.parametrize("layout", LAYOUTS)
def test_a_key_lost_between_chunks_is_refused_not_recreated(layout, redis_client, small_chunks):
    f = make(layout)
    bits = f.layout.segment.keys.bits

    def items():
        for i in range(2500):
            if i == 1500:  # chunk 1 is written; chunk 2 will find no key
                redis_client.delete(bits)
            yield f"k-{i}"

    with pytest.raises(FilterKeyMissing):
        f.add_many(items())
    assert not redis_client.exists(bits)  # no bare key made by the refused write
    with pytest.raises(FilterKeyMissing):
        f.contains_many(f"k-{i}" for i in range(2500))
