"""The async API (``acontains`` / ``aadd`` / ...): the sync answers, no thread per call.

Coroutines run through ``async_to_sync`` (a new event loop per call, in another
thread), so the async ORM's ``sync_to_async`` calls come back to the test's
thread and its database connection; every call starts a new loop, which also
checks that connections are never reused across loops.
"""

from __future__ import annotations

import asyncio
import re
import shutil
import tempfile
import threading
import time

import pytest
from asgiref.sync import async_to_sync
from django.test import override_settings
from redis.asyncio.connection import Connection as AsyncConnection
from redis.asyncio.connection import SSLConnection, UnixDomainSocketConnection
from redis.exceptions import TimeoutError as RedisTimeoutError

import django_bloom
from django_bloom.engine import mirror, plans
from django_bloom.engine.kinds import OneWordLayout, register_layout, unregister_layout
from django_bloom.engine.kinds.capabilities import Planned
from django_bloom.engine.kinds.standard import StandardLayout
from django_bloom.engine.transport import aio as async_connections
from django_bloom.engine.transport import breaker
from django_bloom.exceptions import (
    CircuitOpen,
    FilterKeyMissing,
    OperationNotSupported,
    RedisUnreachable,
    WriteNotReplicated,
)
from django_bloom.models import BloomFilter

pytestmark = pytest.mark.django_db


def run(coro_fn, *args):
    return async_to_sync(coro_fn)(*args)


@pytest.fixture
def aio_sent(monkeypatch):
    """Every payload written on an asyncio stream (redis.asyncio's and the engine's
    writes): one entry per round trip."""
    sent = []
    real = asyncio.StreamWriter.writelines

    def spy(self, data):
        data = list(data)
        sent.append(b"".join(map(bytes, data)))
        return real(self, data)

    monkeypatch.setattr(asyncio.StreamWriter, "writelines", spy)
    return sent


def test_empty_batches_and_one_round_trip_per_single_operation(aio_sent, sent_commands):
    f = django_bloom.create_filter("trips", capacity=1000)

    async def scenario():
        assert await f.acontains_many([]) == [] and await f.aadd_many([]) == []
        assert aio_sent == []
        await f.acontains("warm-up")  # connects (HELLO, CLIENT SETINFO: once per connection)
        del aio_sent[:]
        await f.aadd("x")
        await f.acontains("x")
        await f.acontains_many(["x", "y", "z"])
        return list(aio_sent)

    async_sent = run(scenario)
    assert len(async_sent) == 3  # one round trip each
    f.contains("warm-up")
    del sent_commands[:]
    f.add("x")
    f.contains("x")
    f.contains_many(["x", "y", "z"])
    # The same bytes on the wire as the sync path (but for each write's random stamp).
    assert unstamped(async_sent) == unstamped(sent_commands)


STAMP = re.compile(rb"(\$3\r\nSET\r\n\$3\r\nu24\r\n\$\d+\r\n\d+\r\n)\$\d+\r\n\d+\r\n")


def unstamped(payloads: list[bytes]) -> list[bytes]:
    """``payloads`` with each write's stamp (``SET u24 <trailer bit + 40> <random>``) as 0."""
    return [STAMP.sub(rb"\1$1\r\n0\r\n", payload) for payload in payloads]


def test_bad_input_raises_and_writes_nothing():
    f = django_bloom.create_filter("strict", capacity=1000)

    async def scenario():
        with pytest.raises(TypeError):
            await f.aadd(object())
        with pytest.raises(TypeError):
            await f.aadd_many(["fine", object()])
        with pytest.raises(TypeError):
            await f.acontains(object())
        return await f.acontains("fine")

    assert run(scenario) is False
    assert f.stats().bits_set == 0


def test_a_resized_filter_heals_an_old_handle_in_async():
    old = django_bloom.create_filter("resized", capacity=1000)
    old.add("before")
    resizer = django_bloom.get_filter("resized", refresh=True, encoder=None)
    resizer.rebuild(["before", "rebuilt"], capacity=50_000)
    assert old.meta.num_bits != BloomFilter.objects.get(name="resized").num_bits

    async def scenario():
        return (
            await old.acontains("before"),
            await old.acontains("rebuilt"),
            await old.aadd("after"),
        )

    assert run(scenario) == (True, True, True)
    assert old.meta.num_bits == BloomFilter.objects.get(name="resized").num_bits
    assert django_bloom.get_filter("resized", refresh=True).contains("after")


def test_a_lost_key_raises_in_async_and_is_never_answered_absent(redis_client):
    f = django_bloom.create_filter("lost", capacity=1000)
    f.add("kept")
    redis_client.delete(f.layout.segment.keys.bits)

    async def scenario():
        for call in (f.acontains("kept"), f.acontains_many(["kept"]), f.aadd("new")):
            with pytest.raises(FilterKeyMissing):
                await call

    run(scenario)
    # The refused write (BITFIELD made a bare key) dropped that key again.
    assert not redis_client.exists(f.layout.segment.keys.bits)


def test_frozen_redis_costs_one_timeout_then_the_breaker_answers(redis_server, cache_alias):
    server = redis_server()
    alias = cache_alias("own", server.url)
    f = django_bloom.create_filter("frozen", capacity=1000, cache_alias=alias)
    f.add("present")

    async def scenario():
        assert await f.acontains("present")
        server.pause()
        with pytest.raises(RedisUnreachable) as first:
            await f.acontains("present")
        assert not isinstance(first.value, CircuitOpen)  # it did wait for Redis
        assert breaker.breaker_for(alias).state != breaker.CLOSED
        for call in (f.acontains("present"), f.aadd("x"), f.acontains_many(["a", "b"])):
            with pytest.raises(CircuitOpen):  # at once: no network
                await call

    try:
        run(scenario)
        # The same breaker the sync path uses.
        with pytest.raises(CircuitOpen):
            f.contains("present")
    finally:
        server.resume()
        breaker.reset()
    assert f.contains("present")


@pytest.fixture
def patient(settings):
    """2 s timeouts: 200 calls at once keep one event loop's thread busy, and on a shared
    machine that can exceed 0.2 s (an asyncio timeout counts the time the loop is busy)."""
    settings.DJANGO_BLOOM = {**settings.DJANGO_BLOOM, "SOCKET_TIMEOUT": 2, "CONNECT_TIMEOUT": 2}


def test_200_concurrent_acontains_on_one_loop_use_no_thread_each(monkeypatch, patient):
    f = django_bloom.create_filter("crowd", capacity=10_000)
    f.add_many([f"in-{i}" for i in range(100)])
    items = [f"in-{i}" for i in range(100)] + [f"out-{i}" for i in range(100)]
    expected = f.contains_many(items)
    started = []
    real_start = threading.Thread.start

    def counting_start(thread):
        started.append(thread.name)
        return real_start(thread)

    async def scenario():
        monkeypatch.setattr(threading.Thread, "start", counting_start)
        try:
            return await asyncio.gather(*(f.acontains(item) for item in items))
        finally:
            monkeypatch.undo()

    answers = run(scenario)
    assert answers == expected
    assert answers[:100] == [True] * 100
    # No thread per call (sync_to_async would have started its executor's workers).
    assert started == []


def test_connections_are_per_event_loop():
    f = django_bloom.create_filter("loops", capacity=1000)
    f.add("x")
    pools = []

    async def scenario():
        assert await f.acontains("x")
        pools.append(async_connections._pool("default"))

    run(scenario)
    run(scenario)  # a new loop: must not reuse the first loop's connections
    assert pools[0] is not pools[1]
    assert not {id(c) for c, _ in pools[0].free} & {id(c) for c, _ in pools[1].free}
    # A loop per call (async views under WSGI): closed loops' pools are dropped, not kept.
    for _ in range(20):
        run(scenario)
    assert len(async_connections._pools) <= 2


def test_the_mirror_answers_without_io_in_async(bloom_prefix, aio_sent):
    with override_settings(
        DJANGO_BLOOM={"KEY_PREFIX": bloom_prefix, "MIRROR_FILTERS": ["hot"],
                      "MIRROR_REFRESH_SECONDS": 60,
                      # no invalidation messages: the add's own would make the next
                      # read re-check (and reload), in async as in sync
                      "MIRROR_TRACKING": False}
    ):  # fmt: skip
        f = django_bloom.create_filter("hot", capacity=1000)
        f.add_many(["a", "b"])

        async def scenario():
            assert await f.acontains("a")  # loads the copy (in a worker thread)
            before = len(aio_sent)
            answers = [await f.acontains(x) for x in ("a", "b", "c")]
            many = await f.acontains_many(["a", "zz"])
            assert len(aio_sent) == before
            assert await f.aadd("new")  # a write goes to Redis and into the copy
            return answers, many, await f.acontains("new")

        answers, many, new = run(scenario)
        assert answers == [True, True, False] and many == [True, False] and new
        assert mirror.mirror_for(f).loads == 1


def test_aremove_raises_on_one_bit_layouts():
    f = django_bloom.create_filter("plain", capacity=1000)

    async def scenario():
        with pytest.raises(OperationNotSupported):
            await f.aremove("x")
        with pytest.raises(OperationNotSupported):
            await f.aremove_many(["x"])

    run(scenario)


class ThreadOnlyLayout(StandardLayout):
    """A layout with its own ``contains`` and no plan: async falls back to a thread."""

    layout_name = "test-thread-only"
    calls: list[int] = []

    def contains(self, storage, flat):
        ThreadOnlyLayout.calls.append(threading.get_ident())
        return super().contains(storage, flat)


def test_a_layout_without_plans_still_answers_in_async():
    register_layout(ThreadOnlyLayout)
    try:
        f = django_bloom.create_filter("custom", capacity=1000, layout=ThreadOnlyLayout.layout_name)
        assert f.layout.contains_plan([1] * f.meta.num_hashes) is None
        assert f.layout.add_plan([1] * f.meta.num_hashes) is not None  # add is the base one

        async def scenario():
            await f.aadd("x")
            return await f.acontains("x"), await f.acontains("y"), threading.get_ident()

        yes, no, loop_thread = run(scenario)
        assert (yes, no) == (True, f.contains("y"))
        assert ThreadOnlyLayout.calls and loop_thread not in ThreadOnlyLayout.calls[:2]
    finally:
        unregister_layout(ThreadOnlyLayout.layout_name)


def test_plans_run_on_the_sync_transport_too():
    f = django_bloom.create_filter("planned", capacity=1000, layout="blocked")
    f.add_many(["a", "b"])
    flat = f.positions(f.hashes(["a", "b", "c"]))
    assert isinstance(f.layout, OneWordLayout)
    assert f.storage.run(f.layout.contains_plan(flat)) == f.contains_many(["a", "b", "c"])
    result = f.storage.run(Planned.add_plan(f.layout, f.positions(f.hashes(["d"]))))
    assert result.was_new == [True] and f.contains("d")
    assert plans.command("PING") == b"*1\r\n$4\r\nPING\r\n"


def test_django_builtin_redis_cache_alias_works_in_async():
    f = django_bloom.create_filter("builtin", capacity=1000, cache_alias="djredis")
    f.add("sync-side")

    async def scenario():
        assert async_connections._pool("djredis") is not None  # a real asyncio transport
        return await f.acontains("sync-side"), await f.aadd("async-side"), await f.acontains("no")

    assert run(scenario) == (True, True, f.contains("no"))
    assert f.contains("async-side")


def test_an_unreplicated_async_add_raises_in_one_round_trip(
    redis_server, cache_alias, settings, sent_commands
):
    alias = cache_alias("own", redis_server().url)
    settings.DJANGO_BLOOM = {**settings.DJANGO_BLOOM, "WRITE_REPLICAS": 1}
    f = django_bloom.create_filter("durable", capacity=1000, cache_alias=alias)

    async def scenario():
        assert await f.acontains("warm-up") is False
        del sent_commands[:]
        with pytest.raises(WriteNotReplicated):
            await f.aadd("x")
        assert len(sent_commands) == 1 and b"WAIT" in sent_commands[0]
        with pytest.raises(WriteNotReplicated):
            await f.aadd_many([f"item-{i}" for i in range(2000)])
        return await f.acontains("x")  # the primary has it; its durability is in doubt

    assert run(scenario) is True
    assert [s["failures"] for s in breaker.states() if s["alias"] == alias] == [0]


def test_a_unix_socket_alias_gets_an_asyncio_transport(redis_server, cache_alias):
    directory = tempfile.mkdtemp(prefix="bloom-", dir="/tmp")  # a short socket path
    try:
        sock = f"{directory}/redis.sock"
        redis_server("--unixsocket", sock, "--unixsocketperm", "700")
        alias = cache_alias("unix", f"unix://{sock}?db=0")
        cls, kwargs = async_connections.connection_spec(alias)
        assert cls is UnixDomainSocketConnection and kwargs["path"] == sock
        f = django_bloom.create_filter("unix", capacity=1000, cache_alias=alias)
        f.add("a")

        async def scenario():
            return await f.acontains("a"), await f.aadd("b")

        assert run(scenario) == (True, True) and f.contains("b")
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def test_tls_settings_carry_over_or_the_call_runs_in_a_thread(cache_alias):
    alias = cache_alias(
        "tls", "rediss://127.0.0.1:6390/0", CONNECTION_POOL_KWARGS={"ssl_cert_reqs": "none"}
    )
    cls, kwargs = async_connections.connection_spec(alias)
    assert cls is SSLConnection and kwargs["ssl_cert_reqs"] == "none"
    # (another URL: django-redis keeps one pool per URL and process)
    strict = cache_alias(
        "ocsp", "rediss://127.0.0.1:6391/0", CONNECTION_POOL_KWARGS={"ssl_validate_ocsp": True}
    )
    # redis.asyncio cannot check OCSP: no asyncio transport, rather than a weaker one.
    assert async_connections.connection_spec(strict) is None


def test_the_async_guard_answers_on_the_loop(monkeypatch):
    from django.http import Http404

    from django_bloom import guard

    f = django_bloom.create_filter("slugs", capacity=1000)
    f.add("known")

    def no_sync_check(*args, **kwargs):
        raise AssertionError("the async guard ran the sync check (a thread)")

    monkeypatch.setattr(guard, "certainly_absent", no_sync_check)

    async def scenario():
        await guard.aguard("slugs", "known")  # maybe present: the normal path
        with pytest.raises(Http404):
            await guard.aguard("slugs", "certainly-unknown")
        await guard.aguard("no-such-filter", "x")  # any doubt: the normal path

    run(scenario)


def test_a_loop_too_busy_to_read_a_reply_in_time_still_gets_it(redis_server, cache_alias):
    """An asyncio timeout counts the time the loop is busy elsewhere: when it fires with
    Redis's reply already in the buffer, the reply is read (hiredis's parser loses
    nothing) and the breaker, which tracks Redis, counts nothing."""
    alias = cache_alias("own", redis_server().url)
    f = django_bloom.create_filter("busy", capacity=1000, cache_alias=alias)
    f.add("x")
    timeouts = []
    real = AsyncConnection.read_response

    async def watched(self, *args, **kwargs):
        try:
            return await real(self, *args, **kwargs)
        except RedisTimeoutError:
            timeouts.append(True)
            raise

    async def scenario():
        assert await f.acontains("x")  # connected
        call = asyncio.ensure_future(f.acontains("x"))
        await asyncio.sleep(0)  # it sends and waits for the reply (same loop iteration)
        time.sleep(0.5)  # a blocking call in the loop: Redis answers meanwhile
        return await call

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(AsyncConnection, "read_response", watched)
        assert run(scenario) is True
    assert timeouts == [True]  # the timeout did fire...
    assert [s["failures"] for s in breaker.states() if s["alias"] == alias] == [0]  # ...harmlessly


def test_an_async_add_during_a_rebuild_is_journaled():
    f = django_bloom.create_filter("rebuilding", capacity=1000)
    assert f.storage.begin_build(f.layout.control, "token")
    try:

        async def scenario():
            return await f.aadd("during"), await f.aadd_many(["b1", "b2"])

        assert run(scenario) == (True, [True, True])
        # The rebuild will replay these into its new key: no added item is ever lost.
        assert len(f.storage.read_journal(f.layout.control, 0)) == 2
    finally:
        f.storage.abort_build(f.layout.control, "token")
    assert f.contains_many(["during", "b1", "b2"]) == [True] * 3
