"""BlocklistMiddleware end to end (sync and async) against real Redis."""

import asyncio
import json
import logging

import pytest
from asgiref.sync import async_to_sync, iscoroutinefunction
from django.http import HttpResponse
from django.test import AsyncClient, Client, RequestFactory

from django_bloom import ipblock as blocklist
from django_bloom import services
from django_bloom.engine.storage import Storage
from django_bloom.middleware import BlocklistMiddleware, prefers_json
from django_bloom.models import BloomFilter

pytestmark = pytest.mark.django_db

MIDDLEWARE = "django_bloom.middleware.BlocklistMiddleware"
BLOCKED = "203.0.113.7"
CLEAN = "198.51.100.20"
BROWSER_ACCEPT = "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"


@pytest.fixture
def installed(settings):
    settings.MIDDLEWARE = [MIDDLEWARE, *settings.MIDDLEWARE]
    blocklist.block("203.0.113.0/24", reason="test network")
    blocklist.block("2001:db8:1::/48")


def get(remote_addr, **extra):
    return Client().get("/", REMOTE_ADDR=remote_addr, **extra)


def test_blocked_address_gets_the_403_page(installed):
    response = get(BLOCKED, HTTP_ACCEPT=BROWSER_ACCEPT)
    assert response.status_code == 403
    assert response["Content-Type"].startswith("text/html")
    body = response.content.decode()
    assert "Access denied" in body and BLOCKED in body
    assert "test network" not in body  # the admin's reason stays private
    assert "Accept" in response["Vary"] and "no-store" in response["Cache-Control"]


def test_clean_and_loopback_addresses_pass(installed):
    assert get(CLEAN).content == b"ok"
    assert Client().get("/").status_code == 200  # the test client is 127.0.0.1


def test_json_403_for_clients_that_prefer_json(installed):
    response = get(BLOCKED, HTTP_ACCEPT="application/json")
    assert response.status_code == 403
    assert response.json() == {
        "error": "blocked",
        "detail": "Access from your network address is blocked.",
        "ip": BLOCKED,
    }


@pytest.mark.parametrize(
    "accept, expected",
    [
        ("application/json", True),
        ("application/json, text/plain, */*", True),
        ("application/json, text/html", True),
        ("text/html, application/json", False),
        ("text/html;q=0.5, application/json", True),
        ("application/*", True),
        (BROWSER_ACCEPT, False),
        ("*/*", False),
        ("", False),
        ("application/json;q=0", False),
        ("application/json;q=junk, text/html", False),
    ],
)
def test_prefers_json(accept, expected):
    assert prefers_json(RequestFactory().get("/", HTTP_ACCEPT=accept)) is expected


def test_spoofed_forwarded_for_changes_nothing_without_a_trusted_proxy(installed):
    assert get(BLOCKED, HTTP_X_FORWARDED_FOR=CLEAN).status_code == 403
    assert get(BLOCKED, HTTP_X_FORWARDED_FOR="127.0.0.1").status_code == 403
    assert get(CLEAN, HTTP_X_FORWARDED_FOR=BLOCKED).status_code == 200


def test_trusted_proxy_resolves_the_real_client(installed, bloom_settings):
    bloom_settings(TRUSTED_PROXIES=["10.0.0.0/8"])
    assert get("10.0.0.2", HTTP_X_FORWARDED_FOR=BLOCKED).status_code == 403
    assert get("10.0.0.2", HTTP_X_FORWARDED_FOR=f"{BLOCKED}, 10.0.0.9").status_code == 403
    # The client prepends a clean or loopback address: still the real one is checked.
    assert get("10.0.0.2", HTTP_X_FORWARDED_FOR=f"127.0.0.1, {BLOCKED}").status_code == 403
    assert get("10.0.0.2", HTTP_X_FORWARDED_FOR=f"{BLOCKED}, {CLEAN}").status_code == 200
    # A peer that is not a trusted proxy cannot use the header.
    assert get(CLEAN, HTTP_X_FORWARDED_FOR=BLOCKED).status_code == 200


def test_odd_address_forms(installed):
    assert get(f"::ffff:{BLOCKED}").status_code == 403
    assert get("2001:db8:1:ffff::1").status_code == 403
    assert get("2001:DB8:0001::0001").status_code == 403
    assert get("2001:db8:1::5%eth0").status_code == 403
    assert get("2001:db8:2::1").status_code == 200
    for junk in ("junk", "", "300.1.2.3", "203.0.113.7:80", "x" * 5000):
        assert get(junk).status_code == 200, junk


def test_resolved_address_is_put_on_the_request(installed, bloom_settings):
    bloom_settings(TRUSTED_PROXIES=["10.0.0.0/8"])
    seen = {}

    def view(request):
        seen["ip"] = request.bloom_client_ip
        seen["decision"] = request.bloom_decision
        return HttpResponse("ok")

    middleware = BlocklistMiddleware(view)
    rf = RequestFactory()
    middleware(rf.get("/", REMOTE_ADDR="10.0.0.2", HTTP_X_FORWARDED_FOR=f"::ffff:{CLEAN}"))
    assert seen["ip"] == CLEAN and seen["decision"].reason == blocklist.NOT_LISTED
    middleware(rf.get("/", REMOTE_ADDR="garbage"))
    assert seen["ip"] is None and seen["decision"].reason == blocklist.UNKNOWN


@pytest.mark.parametrize("mirrored", [True, False])
def test_no_redis_round_trip_per_request_or_one_without_the_mirror(
    installed, monkeypatch, bloom_settings, mirrored
):
    # No invalidation messages: this test's own writes' would arrive at any time and have
    # the next check re-read the trailer (once), which is not the steady state counted here;
    # nor a re-check falling due on a busy machine (an hour's interval).
    bloom_settings(BLOCKLIST_MIRROR=mirrored, MIRROR_TRACKING=False, MIRROR_REFRESH_SECONDS=3600)
    get(CLEAN)  # warm the per-process caches
    get(BLOCKED)
    calls = []
    for method in ("_send", "_call", "_eval"):
        original = getattr(Storage, method)

        def counted(self, *a, _original=original, _name=method, **kw):
            calls.append(_name)
            return _original(self, *a, **kw)

        monkeypatch.setattr(Storage, method, counted)
    for address, status in ((CLEAN, 200), (BLOCKED, 403), ("2001:db8:5::1", 200)):
        calls.clear()
        assert get(address).status_code == status
        assert calls == ([] if mirrored else ["_send"]), address
    calls.clear()
    assert get("127.0.0.1").status_code == 200
    assert calls == []


def test_custom_template(installed, settings, bloom_settings):
    settings.TEMPLATES = [
        {
            "BACKEND": "django.template.backends.django.DjangoTemplates",
            "OPTIONS": {
                "loaders": [
                    (
                        "django.template.loaders.locmem.Loader",
                        {"custom/blocked.html": "GO AWAY {{ ip }} {{ status }} {{ entry.reason }}"},
                    )
                ]
            },
        }
    ]
    bloom_settings(BLOCKED_TEMPLATE="custom/blocked.html")
    response = get(BLOCKED)
    assert response.status_code == 403
    assert response.content.decode() == f"GO AWAY {BLOCKED} 403 test network"


# -- failure modes ----------------------------------------------------------------
def _kill_redis_for_the_filter():
    BloomFilter.objects.filter(name="ip-blocklist").update(cache_alias="dead")
    services.forget_filters()


def _lose_the_key(redis_client):
    redis_client.delete(services.get_filter("ip-blocklist").layout.segment.keys.bits)


@pytest.mark.parametrize("breakage", ["dead", "lost"])
def test_fail_open_lets_requests_through_and_warns(installed, caplog, redis_client, breakage):
    _kill_redis_for_the_filter() if breakage == "dead" else _lose_the_key(redis_client)
    with caplog.at_level(logging.WARNING, logger="django_bloom.middleware"):
        assert get(BLOCKED).status_code == 200
        assert get(CLEAN).status_code == 200
    warnings = [r for r in caplog.records if r.name == "django_bloom.middleware"]
    assert len(warnings) == 1  # throttled: one line, not one per request
    assert "FAIL_OPEN=True" in warnings[0].getMessage()


@pytest.mark.parametrize("breakage", ["dead", "lost"])
def test_fail_closed_answers_503(installed, bloom_settings, caplog, redis_client, breakage):
    bloom_settings(FAIL_OPEN=False)
    _kill_redis_for_the_filter() if breakage == "dead" else _lose_the_key(redis_client)
    with caplog.at_level(logging.WARNING, logger="django_bloom.middleware"):
        response = get(CLEAN, HTTP_ACCEPT="application/json")
    assert response.status_code == 503 and response["Retry-After"] == "30"
    assert response.json()["error"] == "unavailable"
    assert "FAIL_OPEN=False" in caplog.text
    html = get(CLEAN)
    assert html.status_code == 503 and "Service temporarily unavailable" in html.content.decode()
    # Allowlisted addresses need no filter: they still pass.
    assert get("127.0.0.1").status_code == 200


def test_missing_filter_follows_fail_open(installed, bloom_settings):
    BloomFilter.objects.all().delete()
    services.forget_filters()
    assert get(BLOCKED).status_code == 200
    bloom_settings(FAIL_OPEN=False)
    assert get(BLOCKED).status_code == 503


def test_no_entries_no_filter_nothing_blocked(settings):
    settings.MIDDLEWARE = [MIDDLEWARE, *settings.MIDDLEWARE]
    assert get(BLOCKED).status_code == 200


# -- async --------------------------------------------------------------------------
class AsyncClientAt(AsyncClient):
    """The ASGI handler takes REMOTE_ADDR from the scope's "client"; set it."""

    def __init__(self, address):
        super().__init__()
        self.address = address

    def _base_scope(self, **request):
        scope = super()._base_scope(**request)
        scope["client"] = [self.address, 4711]
        return scope


def test_async_client(installed, monkeypatch):
    async_calls = []
    original = BlocklistMiddleware.__acall__

    async def recorded(self, request):
        async_calls.append(request.META["REMOTE_ADDR"])
        return await original(self, request)

    monkeypatch.setattr(BlocklistMiddleware, "__acall__", recorded)

    async def get(address, **extra):  # a coroutine function on every Django version
        return await AsyncClientAt(address).get("/", **extra)

    blocked = async_to_sync(get)(BLOCKED, headers={"Accept": "application/json"})
    assert blocked.status_code == 403 and json.loads(blocked.content)["ip"] == BLOCKED
    ok = async_to_sync(get)(CLEAN)
    assert ok.status_code == 200 and ok.content == b"ok"
    assert async_calls == [BLOCKED, CLEAN]  # the async path ran, not the sync one


def test_async_middleware_path(installed):
    seen = {}

    async def view(request):
        seen["ip"] = request.bloom_client_ip
        return HttpResponse("ok")

    middleware = BlocklistMiddleware(view)
    assert middleware.async_mode and iscoroutinefunction(middleware)
    rf = RequestFactory()

    async def run(address):
        return await middleware(rf.get("/", REMOTE_ADDR=address))

    assert async_to_sync(run)(BLOCKED).status_code == 403
    assert "ip" not in seen
    assert async_to_sync(run)(f"::ffff:{CLEAN}").status_code == 200
    assert seen["ip"] == CLEAN


def test_sync_middleware_is_not_a_coroutine():
    middleware = BlocklistMiddleware(lambda request: HttpResponse("ok"))
    assert not middleware.async_mode and not asyncio.iscoroutinefunction(middleware)
