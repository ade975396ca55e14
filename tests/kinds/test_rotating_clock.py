"""A rotating filter whatever a Redis server's clock does (issue 34 item 1).

The server's clock is stepped for real (``server_clock``: a shim preloaded into a
redis-server of the test's own, tests/clockshift.c); the caller's clock (the engine's
``time.time()``) is set by the test. No sleeping: each clock is put where the step
under test must (or must not) happen, half a slice away from any boundary.
"""

from __future__ import annotations

import struct
import time
import types

import pytest

import django_bloom
from django_bloom.engine import format as fmt
from django_bloom.engine.kinds.rotating import commands as rotating_ops
from django_bloom.models import BloomFilter
from tests.engine.test_failover import wait_for_link

pytestmark = pytest.mark.django_db
SLICE = 600  # seconds: far more than a test takes, so only the clocks set here step it
ITEMS = [f"acked-{i}" for i in range(51)]


@pytest.fixture
def caller(monkeypatch):
    """The caller's clock, ``caller.shift`` seconds from the real one."""
    clock = types.SimpleNamespace(shift=0.0)
    real = time.time
    fake = types.SimpleNamespace(time=lambda: real() + clock.shift)
    monkeypatch.setattr(rotating_ops, "time", fake, raising=False)
    return clock


@pytest.fixture
def shifted(redis_server, server_clock, cache_alias):
    server = redis_server(env=server_clock.env)
    return server, cache_alias("shifted", server.url)


def window(alias, slices=2):
    return django_bloom.create_filter(
        "window", capacity=1000, error_rate=0.01, layout="rotating", cache_alias=alias,
        options={"slices": slices, "slice_seconds": SLICE},
    )  # fmt: skip


def opening(f, client) -> tuple[int, float, float]:
    """(current index, its opening by the server's clock, by the caller's): the header."""
    raw = client.get(f.layout.window.control_key)
    return struct.unpack_from(">Idd", raw, fmt.TRAILER_BYTES + 4 * (f.layout.slices + 2))


def slices_of(f, client) -> list[int]:
    keys = client.scan_iter(match=f.layout.window.slice_pattern, count=1000)
    return sorted(int(k.rsplit(b":", 1)[1]) for k in keys)


def put_clocks(server_clock, caller, start, periods_server, periods_caller):
    """Each clock ``periods`` slices and a half past the first slice's opening."""
    _index, open_s, open_c = start
    server_clock.set(open_s + (periods_server + 0.5) * SLICE - time.time())
    caller.shift = open_c + (periods_caller + 0.5) * SLICE - time.time()


def test_a_server_clock_stepped_back_never_moves_the_window_back(shifted, server_clock, caller):
    server, alias = shifted
    f = window(alias)
    assert f.add_many(ITEMS) == [True] * len(ITEMS)
    (first,) = slices_of(f, server.client())
    server_clock.set(-10 * SLICE)  # NTP stepped it back ten slices
    assert f.contains_many(ITEMS) == [True] * len(ITEMS)
    assert all(f.contains(item) for item in ITEMS[:5])
    assert f.add("after the step") is True
    assert slices_of(f, server.client()) == [first]  # the same slice, not an older one
    assert f.contains_many(ITEMS) == [True] * len(ITEMS)


def test_a_server_clock_stepped_forward_never_ends_a_window_early(shifted, server_clock, caller):
    server, alias = shifted
    f = window(alias)
    f.add_many(ITEMS)
    start = opening(f, server.client())
    put_clocks(server_clock, caller, start, 30, 0)  # the server's clock a day (30 slices) on
    assert f.contains_many(ITEMS) == [True] * len(ITEMS)
    assert f.add("during the jump") is True
    assert f.contains_many(ITEMS) == [True] * len(ITEMS)  # (the add stepped nothing)
    assert slices_of(f, server.client()) == [start[0]]  # nor did Redis expire the slice
    # Time really passes (both clocks agree): one slice, two (W): still remembered...
    for periods in (1, 2):
        put_clocks(server_clock, caller, start, 30 + periods, periods)
        assert f.add(f"step {periods}") is True
        assert f.contains_many(ITEMS) == [True] * len(ITEMS), periods
    # ... three: the item's slice has left the window, and its key is gone.
    put_clocks(server_clock, caller, start, 33, 3)
    assert f.contains_many(ITEMS[:3]) == [False] * 3
    f.add("step 3")
    assert start[0] not in slices_of(f, server.client())


def test_the_window_still_rotates_as_time_passes_and_after_an_idle_spell(
    shifted, server_clock, caller
):
    server, alias = shifted
    f = window(alias, slices=3)
    f.add("old")
    start = opening(f, server.client())
    for periods in (1, 2, 3):  # reads alone (no add writes the step) see the window move
        put_clocks(server_clock, caller, start, periods, periods)
        assert f.contains("old") is True, periods
    put_clocks(server_clock, caller, start, 4, 4)
    assert f.contains("old") is False  # forgotten after W + 1 slices, as before
    put_clocks(server_clock, caller, start, 40, 40)  # idle for 40 slices: both clocks agree
    assert f.add("old") is True
    assert opening(f, server.client())[0] == start[0] + 40
    assert f.stats().details["slices_live"] == 1


def test_a_failover_to_a_replica_whose_clock_lags_keeps_every_acknowledged_item(
    redis_server, server_clock, cache_alias, bloom_settings
):
    """The issue's case: WRITE_REPLICAS = 1, 6 slices of 30 s, the promoted replica's
    clock 45 s behind: every acknowledged item is present after the promotion (the
    code before issue 34 answered absent for 51 of 51)."""
    bloom_settings(WRITE_REPLICAS=1, WRITE_REPLICAS_TIMEOUT_MS=50)
    primary = redis_server()
    replica = redis_server("--replicaof", "127.0.0.1", str(primary.port), env=server_clock.env)
    server_clock.set(-45)
    wait_for_link(primary, replica)
    alias = cache_alias("primary", primary.url)
    f = django_bloom.create_filter(
        "recent", capacity=1000, layout="rotating", cache_alias=alias,
        options={"slices": 6, "slice_seconds": 30},
    )  # fmt: skip
    f.add_many(ITEMS[:25])
    for item in ITEMS[25:]:
        f.add(item)
    before = slices_of(f, primary.client())
    primary.kill()
    replica.client().replicaof("NO", "ONE")
    promoted = cache_alias("promoted", replica.url)
    bloom_settings(WRITE_REPLICAS=0)
    BloomFilter.objects.filter(name="recent").update(cache_alias=promoted)
    g = django_bloom.get_filter("recent", refresh=True)
    assert g.contains_many(ITEMS) == [True] * len(ITEMS)
    assert [g.contains(item) for item in ITEMS] == [True] * len(ITEMS)
    assert g.add("after the failover") is True
    assert min(slices_of(g, replica.client())) >= min(before)  # never an older slice
    assert g.contains_many(ITEMS) == [True] * len(ITEMS)
