"""Mirrors learn of other processes' writes from Redis's invalidation messages.

``CLIENT TRACKING ... BCAST`` on a listener connection (engine/transport/tracking.py): a
write by another process reaches a mirror long before its polling interval
(``MIRROR_REFRESH_SECONDS = 3600`` here) could have refreshed it. Listener
lost: it reconnects and re-checks every mirror, so a write made meanwhile is
not missed. Tracking refused by the server: polling alone, as before.
"""

import multiprocessing
import subprocess
import sys
import time

import pytest
from django.conf import settings
from django.test import override_settings

import django_bloom
from django_bloom.engine import mirror
from django_bloom.engine.transport import packing, tracking

pytestmark = pytest.mark.django_db

WRITER = (
    "import sys, redis\n"
    "pool = redis.ConnectionPool.from_url(sys.argv[1])\n"
    "conn = pool.get_connection('BITFIELD')\n"
    "conn.send_packed_command([bytes.fromhex(sys.argv[2])])\n"
    "reply = conn.read_response()\n"
    "assert not isinstance(reply, Exception), reply\n"
)


def add_from_another_process(url: str, f, item: str) -> None:
    """The engine's own write (its BITFIELD command, byte for byte), sent by a new process."""
    flat = [int(g) for g in f.positions(f.hashes([item]))]
    payload = packing.pack_set(f.layout.segment, flat).payload
    subprocess.run([sys.executable, "-c", WRITER, url, payload.hex()], check=True, timeout=60)


def seen_within(f, item: str, seconds: float) -> float:
    """Seconds until the mirror answers True for ``item``; fails after ``seconds``."""
    start = time.monotonic()
    while not f.contains(item):
        assert time.monotonic() - start < seconds, f"the mirror never saw {item!r}"
        time.sleep(0.001)
    return time.monotonic() - start


@pytest.fixture
def hot(bloom_prefix):
    def make(alias="default", **extra):
        config = {
            "KEY_PREFIX": bloom_prefix,
            "MIRROR_FILTERS": ["hot"],
            "MIRROR_REFRESH_SECONDS": 3600,  # polling alone would not refresh within the test
            **extra,
        }
        override = override_settings(DJANGO_BLOOM=config)
        override.enable()
        made.append(override)
        f = django_bloom.create_filter("hot", capacity=1000, cache_alias=alias)
        assert not f.contains("warm-up")  # loads the copy; starts the listener
        return f

    made = []
    yield make
    for override in reversed(made):
        override.disable()


def registered(f):
    """The listener ``f``'s mirror watches with, once it has registered every watched key."""
    listener = mirror.mirror_for(f).listener
    deadline = time.monotonic() + 10
    while not listener.active:
        assert time.monotonic() < deadline, listener.refused
        time.sleep(0.01)
    return listener


def listening(f):
    """The alias's listener, once it has registered ``f``'s key and the mirror has
    taken in the re-check that registration asks for."""
    listener = registered(f)
    assert f.contains("warm-up") is False
    copy = mirror.mirror_for(f)
    assert copy.invalidations == copy.checked_invalidations  # nothing pending
    return listener


def test_another_process_add_is_seen_before_polling_could(hot):
    f = hot()
    listening(f)
    loads = mirror.mirror_for(f).loads
    add_from_another_process(settings.CACHES["default"]["LOCATION"], f, "elsewhere")
    latency = seen_within(f, "elsewhere", 2)
    print(f"\n[figures] mirror saw another process's add {latency * 1000:.1f} ms after it returned")
    assert mirror.mirror_for(f).loads == loads + 1
    assert f.contains("warm-up") is False  # still a real copy, not a pass-through


def test_a_killed_listener_reconnects_and_misses_nothing(hot, redis_client, monkeypatch):
    monkeypatch.setattr(tracking, "RECONNECT_SECONDS", 1.0)  # the write lands while it is down
    f = hot()
    listener = listening(f)
    first = listener.client_id
    assert redis_client.execute_command("CLIENT", "KILL", "ID", str(first)) == 1
    add_from_another_process(settings.CACHES["default"]["LOCATION"], f, "while-down")
    seen_within(f, "while-down", 10)
    assert listener.client_id != first  # a new connection registered the prefix again


def test_refused_tracking_falls_back_to_polling(hot, redis_server, cache_alias):
    server = redis_server("--rename-command", "CLIENT", "")  # no CLIENT TRACKING
    alias = cache_alias("no-tracking", server.url)
    f = hot(alias, MIRROR_REFRESH_SECONDS=0.2)
    listener = mirror.mirror_for(f).listener
    deadline = time.monotonic() + 10
    while listener.refused is None:
        assert time.monotonic() < deadline, "the listener never gave up"
        time.sleep(0.01)
    assert not listener.active
    add_from_another_process(server.url, f, "polled")
    seen_within(f, "polled", 10)  # the polling interval, as without tracking


def _in_forked_child(f, url, queue):
    try:
        assert mirror.mirror_for(f).listener is None  # the parent's thread is gone
        f.contains("warm-up")  # the re-check after the fork registers the child's listener
        listening(f)
        add_from_another_process(url, f, "seen-by-child")
        seen_within(f, "seen-by-child", 2)
        queue.put("ok")
    except BaseException as exc:  # reported to the parent
        queue.put(repr(exc))


def test_a_forked_child_tracks_with_its_own_listener(hot):
    """A mirror made before a fork (a preloading server) is tracked in the child too."""
    f = hot()
    listening(f)
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    url = settings.CACHES["default"]["LOCATION"]
    child = ctx.Process(target=_in_forked_child, args=(f, url, queue))
    child.start()
    try:
        assert queue.get(timeout=60) == "ok"
    finally:
        child.join(timeout=30)


def _read_in_forked_child(f, queue):
    try:
        queue.put(repr(f.contains("warm-up")))  # the copy is re-checked: a new connection
    except BaseException as exc:  # reported to the parent
        queue.put(repr(exc))


def test_listener_connections_never_use_up_the_pool(hot):
    """redis-py 8 allows a pool 100 connections in all, counted until given back, and a
    listener's connection is its own: it is never given back. Counted, 100 reconnects of
    the listener (Redis restarts, a flapping network; every settings change in a test run)
    left the process, and every child it forks afterwards (they inherit the count), unable
    to open a connection: "Too many connections", so FilterUnavailable on every read."""
    f = hot()
    listening(f)
    for _ in range(120):  # what 120 (re)connects of the listener make
        f.storage.make_connection().disconnect()
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    child = ctx.Process(target=_read_in_forked_child, args=(f, queue))
    child.start()
    try:
        assert queue.get(timeout=60) == "False"
    finally:
        child.join(timeout=30)
