"""BlocklistMiddleware under ASGI (Django's ASGIHandler through httpx.ASGITransport):
blocks and passes as the sync path does, checks on the event loop, fails open/closed.

Requests run in coroutines driven by ``async_to_sync`` (one event loop per
scenario), so the handler's thread-sensitive parts come back to the test's
thread and its database connection.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
from pathlib import Path

import httpx
import pytest
from asgiref.sync import async_to_sync
from django.core.asgi import get_asgi_application
from django.http import HttpResponse
from django.urls import path

from django_bloom import ipblock as blocklist
from django_bloom import services
from django_bloom.engine.mirror import LocalMirror
from django_bloom.engine.transport import breaker
from django_bloom.filter import Filter
from django_bloom.ipblock import service
from django_bloom.models import BloomFilter

pytestmark = [pytest.mark.django_db, pytest.mark.urls(__name__)]

BLOCKED = "203.0.113.7"
CLEAN = "198.51.100.20"


async def ok(request):
    return HttpResponse(b"ok", content_type="text/plain")


urlpatterns = [path("", ok)]


@pytest.fixture(autouse=True)
def keep_the_test_connection():
    """As Django's test client does: the handler's request signals must not close the
    test's database connection (inside its transaction; PostgreSQL really closes it)."""
    from django.core.signals import request_finished, request_started
    from django.db import close_old_connections

    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    yield
    request_started.connect(close_old_connections)
    request_finished.connect(close_old_connections)


@pytest.fixture
def installed(settings):
    settings.MIDDLEWARE = ["django_bloom.middleware.BlocklistMiddleware"]
    blocklist.block("203.0.113.0/24", reason="test network")
    blocklist.block("2001:db8:1::/48")


def fetch(*addresses, accept="text/html"):
    """Status codes (and responses) of concurrent GET / from ``addresses`` through the ASGI app."""
    app = get_asgi_application()

    async def one(address):
        transport = httpx.ASGITransport(app=app, client=(address, 4711))
        async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as c:
            return await c.get("/", headers={"Accept": accept})

    async def scenario():
        return await asyncio.gather(*(one(a) for a in addresses))

    return async_to_sync(scenario)()


def test_blocks_a_blocked_address_and_passes_others(installed):
    blocked, clean, v6, loopback = fetch(BLOCKED, CLEAN, "2001:db8:1::5", "127.0.0.1")
    assert blocked.status_code == 403 and "Access denied" in blocked.text
    assert "no-store" in blocked.headers["Cache-Control"]
    assert clean.status_code == 200 and clean.text == "ok"
    assert v6.status_code == 403
    assert loopback.status_code == 200
    as_json = fetch(BLOCKED, accept="application/json")[0]
    assert as_json.status_code == 403 and as_json.json()["ip"] == BLOCKED


@pytest.mark.parametrize("mirrored", [False, True])
def test_the_check_runs_on_the_event_loop_not_in_a_thread(
    installed, monkeypatch, bloom_settings, mirrored
):
    """Without the mirror the round trip is awaited on the loop (``acontains_many``); with
    it the candidates are probed on the copy, on the loop too, with no filter call."""
    bloom_settings(BLOCKLIST_MIRROR=mirrored, MIRROR_TRACKING=False, MIRROR_REFRESH_SECONDS=3600)
    fetch(CLEAN)  # warm: prefix lengths, the filter's row, the copy, as in a running site
    ran_in, probed_in = [], []
    real = Filter._acontains_many  # under acontains_many and its without_normalizer twin
    real_probe = LocalMirror.probe

    async def spy(self, items, bound):
        ran_in.append(threading.get_ident())
        return await real(self, items, bound)

    def probe_spy(self, *args):
        probed_in.append(threading.get_ident())
        return real_probe(self, *args)

    def no_sync_check(*args, **kwargs):
        raise AssertionError("the async stack ran the sync check")

    monkeypatch.setattr(Filter, "_acontains_many", spy)
    monkeypatch.setattr(LocalMirror, "probe", probe_spy)
    monkeypatch.setattr(service, "check_ip", no_sync_check)
    main_thread = threading.get_ident()
    statuses = [r.status_code for r in fetch(BLOCKED, CLEAN)]
    assert statuses == [403, 200]
    if mirrored:
        assert ran_in == [] and len(set(probed_in)) == 1 and main_thread not in probed_in
    else:
        assert len(ran_in) == 2 and main_thread not in ran_in  # the loop's (async_to_sync)


def test_200_concurrent_requests_get_the_right_answers(installed, bloom_settings):
    # 2 s timeouts: 200 requests at once keep the loop's thread busy; on a shared machine
    # that can exceed 0.2 s (an asyncio timeout counts the time the loop is busy).
    bloom_settings(SOCKET_TIMEOUT=2, CONNECT_TIMEOUT=2)
    addresses = [f"203.0.113.{i % 250 + 1}" if i % 4 == 0 else f"198.51.100.{i % 250 + 1}"
                 for i in range(200)]  # fmt: skip
    statuses = [r.status_code for r in fetch(*addresses)]
    assert statuses == [403 if a.startswith("203.") else 200 for a in addresses]


def _kill_redis_for_the_filter():
    BloomFilter.objects.filter(name="ip-blocklist").update(cache_alias="dead")
    services.forget_filters()


def _lose_the_key(redis_client):
    redis_client.delete(services.get_filter("ip-blocklist").layout.segment.keys.bits)


@pytest.mark.parametrize("breakage", ["dead", "lost"])
def test_redis_down_fails_open_as_the_sync_path_does(installed, redis_client, breakage):
    _kill_redis_for_the_filter() if breakage == "dead" else _lose_the_key(redis_client)
    assert [r.status_code for r in fetch(BLOCKED, CLEAN)] == [200, 200]


@pytest.mark.parametrize("breakage", ["dead", "lost"])
def test_redis_down_fails_closed_as_the_sync_path_does(
    installed, bloom_settings, redis_client, breakage
):
    bloom_settings(FAIL_OPEN=False)
    _kill_redis_for_the_filter() if breakage == "dead" else _lose_the_key(redis_client)
    response, loopback = fetch(CLEAN, "127.0.0.1", accept="application/json")
    assert response.status_code == 503 and response.headers["Retry-After"] == "30"
    assert response.json()["error"] == "unavailable"
    assert loopback.status_code == 200  # allowlisted: no filter needed


@pytest.mark.parametrize("mirrored", [False, True])
def test_a_frozen_redis_fails_open_and_the_breaker_answers_the_rest(
    installed, redis_server, cache_alias, bloom_settings, mirrored
):
    """Without the mirror every check needs Redis: fail open, the breaker answers the rest.
    With it, a copy checked within MIRROR_REFRESH_SECONDS answers alone: still right."""
    # An hour: the copy is surely within its interval, however busy the machine; no listener
    # (one that notices the frozen server invalidates the copy: then it fails open too).
    bloom_settings(BLOCKLIST_MIRROR=mirrored, MIRROR_REFRESH_SECONDS=3600, MIRROR_TRACKING=False)
    server = redis_server()
    alias = cache_alias("own", server.url)
    BloomFilter.objects.filter(name="ip-blocklist").update(cache_alias=alias)
    services.forget_filters()
    service.rebuild_blocklist()  # the new server holds the list
    assert [r.status_code for r in fetch(BLOCKED, CLEAN)] == [403, 200]
    server.pause()
    try:
        # Concurrent requests: the first wait for the 0.2 s timeout, then the breaker answers.
        statuses = [r.status_code for r in fetch(*[BLOCKED] * 20, CLEAN)]
        if mirrored:
            assert statuses == [403] * 20 + [200]
            return
        assert statuses == [200] * 21  # FAIL_OPEN: never a wrong 403, never a hang
        assert breaker.breaker_for(alias).state != breaker.CLOSED
    finally:
        server.resume()
        breaker.reset()


@pytest.mark.slow
def test_the_asgi_bench_runs_end_to_end():
    """bench/asgi_middleware.py at a tiny size (uvicorn, httpx): every configuration
    answered every request, the blocked ones with 403. No timing is asserted."""
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    done = subprocess.run(
        [sys.executable, "-m", "bench.asgi_middleware",
         "--concurrency", "20", "--rounds", "1", "--blocked", "20",
         "--timeout", "120"],  # per request: a limit for a busy machine, not a timing
        cwd=Path(__file__).resolve().parents[2], env=env,
        capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    over_http, in_process = done.stdout.split("The middleware alone", 1)

    def rows(text):
        return {r[1].strip(): [c.strip() for c in r[1:-1]]
                for r in (line.split("|") for line in text.splitlines() if line.startswith("| "))
                if r[1].strip() in ("off", "thread", "async")}  # fmt: skip

    http = rows(over_http)
    assert set(http) == {"off", "thread", "async"}
    for label, (_, requests, *_, blocked, failed) in http.items():
        assert (requests, failed) == ("20", "0"), done.stdout  # every request answered
        assert blocked == ("0" if label == "off" else "1"), done.stdout  # 1 in 20 is blocked
    alone = rows(in_process)
    assert set(alone) == {"thread", "async"}
    assert all(row[1] == "20" and row[-1] == "1" for row in alone.values()), done.stdout
