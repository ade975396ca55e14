"""Large async batches on a healthy Redis (issue 23, item 5): ``aadd_many`` and
``acontains_many`` send in pieces, and ``SOCKET_TIMEOUT`` bounds each piece's progress,
not the whole batch, as the sync path does. (``LoopTooBusy`` for a loop that is really
blocked: tests/engine/test_async.py::test_a_loop_too_busy_to_read_a_reply_in_time_still_gets_it.)
"""

from __future__ import annotations

import asyncio

import pytest
from asgiref.sync import async_to_sync

import django_bloom
from django_bloom.engine.transport import breaker
from django_bloom.engine.transport.aio import LoopTooBusy
from django_bloom.exceptions import CircuitOpen, RedisUnreachable

pytestmark = [pytest.mark.django_db, pytest.mark.slow]

ITEMS = 400_000


def test_an_async_batch_of_400000_items_succeeds_as_the_sync_one_does():
    f = django_bloom.create_filter("big-async", capacity=1_000_000, error_rate=0.001)
    items = [f"item-{i}" for i in range(ITEMS)]
    absent = [f"other-{i}" for i in range(ITEMS)]

    async def scenario():
        added = await f.aadd_many(items)
        again = await f.aadd_many(items[:1000])
        found = await f.acontains_many(items)
        others = await f.acontains_many(absent)
        return added, again, found, others

    added, again, found, others = async_to_sync(scenario)()
    assert sum(added) > ITEMS * 0.99 and not any(again)
    assert all(found)  # never "absent" for an added item
    assert sum(others) < ITEMS * 0.01
    assert f.contains_many(items[::1000]) == [True] * (ITEMS // 1000)  # the sync path agrees
    assert [s["failures"] for s in breaker.states() if s["alias"] == f.storage.alias] == [0]


def test_a_frozen_redis_still_fails_a_large_async_batch_in_one_timeout(redis_server, cache_alias):
    """Progress, not the batch, is timed: a Redis that stops reading (SIGSTOP) sends no
    reply, the reader's SOCKET_TIMEOUT fires and stops the writer; the breaker counts it."""
    server = redis_server()
    alias = cache_alias("own", server.url)
    f = django_bloom.create_filter("frozen-big", capacity=1_000_000, cache_alias=alias)
    items = [f"item-{i}" for i in range(100_000)]  # several MB: written in pieces

    async def scenario():
        await f.acontains("warm")  # connected
        server.pause()
        with pytest.raises(RedisUnreachable) as failed:
            await f.aadd_many(items)
        return failed.value

    try:
        failure = async_to_sync(scenario)()
        assert not isinstance(failure, (CircuitOpen, LoopTooBusy))  # it did wait for Redis
        assert breaker.breaker_for(alias).state != breaker.CLOSED
    finally:
        server.resume()
        breaker.reset()
    f.add_many(items[:100])
    assert all(f.contains_many(items[:100]))  # answers again


# -- any iterable, chunk by chunk (BATCH_CHUNK_ITEMS): issue 30 ---------------------------
CHUNK = 1000


@pytest.fixture
def small_chunks(settings):
    settings.DJANGO_BLOOM = {**settings.DJANGO_BLOOM, "BATCH_CHUNK_ITEMS": CHUNK}


def test_an_async_batch_hashes_and_sends_a_generator_chunk_by_chunk(redis_client, small_chunks):
    """Before: the generator was read and hashed whole before anything was sent."""
    f = django_bloom.create_filter("agen", capacity=50_000)
    segment = f.layout.segment
    written_when_read = {}

    def items():
        for i in range(3500):
            if i % CHUNK == 0:
                written_when_read[i] = redis_client.bitcount(
                    segment.keys.bits, 0, segment.num_bytes - 1
                )
            yield f"a-{i}"

    async def scenario():
        added = await f.aadd_many(items(), count=True)
        found = await f.acontains_many(f"a-{i}" for i in range(3500))
        return added, found, await f.acontains_many((f"a-{i}" for i in range(10)), count=True)

    assert async_to_sync(scenario)() == (3500, [True] * 3500, 10)
    assert 0 == written_when_read[0] < written_when_read[1000] < written_when_read[3000]


def test_an_async_batch_cancelled_between_chunks_leaves_the_connection_clean(small_chunks):
    """Cancelled while a chunk's round trip is in flight: the connection is dropped, not
    given back with an unread reply; the chunks before are written, the next call answers
    right on the same loop."""
    f = django_bloom.create_filter("acancel", capacity=50_000)

    async def scenario():
        task = None

        def items():
            for i in range(5000):
                if i == 2500:
                    task.cancel()  # lands at the next await: chunk 3's round trip
                yield f"c-{i}"

        await f.acontains("warm")
        task = asyncio.ensure_future(f.aadd_many(items()))
        with pytest.raises(asyncio.CancelledError):
            await task
        first = await f.acontains_many([f"c-{i}" for i in range(2000)])
        absent = await f.acontains_many([f"never-{i}" for i in range(2000)])
        return first, sum(absent), await f.aadd_many(["fresh"])

    first, false_positives, fresh = async_to_sync(scenario)()
    assert first == [True] * 2000  # chunks 1 and 2 were written before the cancel
    assert false_positives < 100 and fresh == [True]
    assert f.contains_many([f"c-{i}" for i in range(2000)]) == [True] * 2000
