"""A kept connection that Redis closed while it sat idle is never used for a call.

Redis closes idle clients: its ``timeout`` setting (``timeout 300`` is common), a
restart on the same address, ``CLIENT KILL``, a proxy's idle cut. The engine keeps
its hot-path connections between calls; the next call on one that Redis closed
wrote into a dead socket and failed (``RedisUnreachable``, counted by the breaker):
once per kept connection after every restart. It failed CI on a test whose fresh
server reused a port an earlier test's server had (the same django-redis pool).
"""

from __future__ import annotations

import asyncio
import time

import pytest

import django_bloom
from django_bloom.engine.transport.connections import IDLE_CHECK_SECONDS

pytestmark = pytest.mark.django_db


def close_idle_clients(server) -> None:
    """``CLIENT KILL TYPE normal`` (all but the killer), then wait until Redis lists
    only the killer's connection (and past ``IDLE_CHECK_SECONDS``: a connection used
    more recently is not looked at, a call in flight as Redis closes it fails)."""
    time.sleep(IDLE_CHECK_SECONDS * 2)
    client = server.client()
    client.execute_command("CLIENT", "KILL", "TYPE", "normal")
    deadline = time.monotonic() + 30
    while len(client.client_list()) > 1:
        assert time.monotonic() < deadline, client.client_list()
        time.sleep(0.01)


@pytest.fixture
def own(redis_server, cache_alias):
    server = redis_server()
    return server, cache_alias("own", server.url)


@pytest.mark.parametrize("call", ["add", "contains", "add_many", "contains_many"])
def test_a_call_after_redis_closed_the_kept_connection_succeeds(own, call):
    server, alias = own
    f = django_bloom.create_filter("idle", capacity=1000, cache_alias=alias)
    f.add_many(["a", *(f"x-{i}" for i in range(300))])
    close_idle_clients(server)
    items = ["a", *(f"y-{i}" for i in range(300))]  # a streamed batch: several sends
    answer = getattr(f, call)(items if call.endswith("_many") else "a")
    expected = {"add": False, "contains": True}
    if call in expected:
        assert answer is expected[call]
    else:
        assert answer[0] is (call == "contains_many")
    assert f.contains("a") is True


def test_a_restart_on_the_same_address_costs_no_failed_call(own):
    server, alias = own
    f = django_bloom.create_filter("restarted", capacity=1000, cache_alias=alias)
    assert f.add("a") is True
    server.kill()
    server.start()  # no persistence: the key is gone, the filter is recreated
    g = django_bloom.create_filter("after", capacity=1000, cache_alias=alias)
    assert g.add("b") is True
    assert g.contains("b") is True


def test_an_async_call_after_redis_closed_the_kept_connection_succeeds(own):
    server, alias = own
    f = django_bloom.create_filter("idle-async", capacity=1000, cache_alias=alias)

    async def scenario():
        assert await f.aadd("a") is True
        close_idle_clients(server)  # the loop has not run since: it has not seen the EOF
        assert await f.aadd("a") is False
        close_idle_clients(server)
        await asyncio.sleep(0.05)  # now it has
        assert await f.acontains("a") is True

    asyncio.run(scenario())
