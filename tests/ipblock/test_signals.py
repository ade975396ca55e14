"""The blocklist's signals: ``request_blocked``, ``entry_blocked``, ``entry_unblocked``.
A receiver that raises never turns a refusal into a 500, nor lets a request through."""

import logging

import pytest
from asgiref.sync import async_to_sync
from django.db import transaction
from django.http import HttpResponse
from django.test import Client, RequestFactory
from django.urls import reverse

from django_bloom import ipblock
from django_bloom.ipblock import signals
from django_bloom.middleware import BlocklistMiddleware
from django_bloom.models import BlockedEntry

pytestmark = pytest.mark.django_db


@pytest.fixture
def received():
    """Every signal of the three, as (name, kwargs without the signal)."""
    seen = []
    receivers = {}
    for name in ("request_blocked", "entry_blocked", "entry_unblocked"):

        def receiver(sender, _name=name, **kwargs):
            kwargs.pop("signal")
            seen.append((_name, kwargs))

        receivers[name] = receiver
        getattr(signals, name).connect(receiver)
    yield seen
    for name, receiver in receivers.items():
        getattr(signals, name).disconnect(receiver)


@pytest.fixture
def committed(django_capture_on_commit_callbacks):
    """``with committed():`` runs what waits for the commit (the test's transaction never
    commits) as the block ends."""
    return lambda: django_capture_on_commit_callbacks(execute=True)


@pytest.fixture
def failing():
    def receiver(sender, **kwargs):
        raise RuntimeError("the alerting service is down")

    for signal in (signals.request_blocked, signals.entry_blocked, signals.entry_unblocked):
        signal.connect(receiver)
    yield
    for signal in (signals.request_blocked, signals.entry_blocked, signals.entry_unblocked):
        signal.disconnect(receiver)


def test_block_and_unblock_announce_the_entry_once_committed(received, committed):
    with committed():
        entry = ipblock.block("203.0.113.0/24", reason="scraper")
    with committed():
        ipblock.block("203.0.113.0/24", reason="scraper, still")
    assert [(n, k["entry"].network, k["created"]) for n, k in received] == [
        ("entry_blocked", "203.0.113.0/24", True),
        ("entry_blocked", "203.0.113.0/24", False),
    ]
    assert received[0][1]["entry"].pk == entry.pk
    received.clear()
    with committed():
        ipblock.unblock("203.0.113.0/24")
        assert received == []  # not before the commit
    assert [(n, k["entry"].network) for n, k in received] == [("entry_unblocked", "203.0.113.0/24")]
    received.clear()
    with committed(), transaction.atomic():
        ipblock.block("198.51.100.0/24")
        transaction.set_rollback(True)
    assert received == []  # rolled back: never happened


def test_an_import_announces_each_new_entry(received, committed):
    ipblock.block("203.0.113.0/24")
    received.clear()
    with committed():
        result = ipblock.import_netset(["203.0.113.0/24", "198.51.100.0/24", "2001:db8::/32"])
    assert result.added == 2
    assert sorted(k["entry"].network for _, k in received) == ["198.51.100.0/24", "2001:db8::/32"]
    assert all(k["created"] and k["entry"].pk for _, k in received)


def test_a_refused_request_announces_request_entry_and_reason(received, settings):
    settings.MIDDLEWARE = ["django_bloom.middleware.BlocklistMiddleware"]
    ipblock.block("203.0.113.0/24", reason="scraper")
    received.clear()
    assert Client().get("/", REMOTE_ADDR="203.0.113.9").status_code == 403
    assert Client().get("/", REMOTE_ADDR="192.0.2.1").status_code != 403
    [(name, kwargs)] = received
    assert name == "request_blocked" and kwargs["reason"] == ipblock.BLOCKED
    assert kwargs["entry"].network == "203.0.113.0/24" and kwargs["entry"].reason == "scraper"
    assert kwargs["request"].bloom_client_ip == "203.0.113.9"


def test_a_failing_receiver_neither_breaks_nor_opens_a_refusal(
    failing, caplog, settings, committed
):
    settings.MIDDLEWARE = ["django_bloom.middleware.BlocklistMiddleware"]
    with caplog.at_level(logging.ERROR, logger="django.dispatch"), committed():
        ipblock.block("203.0.113.0/24")  # entry_blocked's receiver fails: blocked all the same
        assert ipblock.check_ip("203.0.113.9").blocked
        assert Client().get("/", REMOTE_ADDR="203.0.113.9").status_code == 403

        middleware = BlocklistMiddleware(_async_view)
        request = RequestFactory().get("/", REMOTE_ADDR="203.0.113.9")
        assert async_to_sync(middleware)(request).status_code == 403
        assert ipblock.unblock("203.0.113.0/24") == 1
    failures = [r for r in caplog.records if "the alerting service is down" in r.getMessage()]
    assert len(failures) == 4  # logged by Django (django.dispatch), once per signal sent


def test_the_async_path_announces_too(received):
    ipblock.block("203.0.113.0/24")
    received.clear()
    middleware = BlocklistMiddleware(_async_view)
    response = async_to_sync(middleware)(RequestFactory().get("/", REMOTE_ADDR="203.0.113.9"))
    assert response.status_code == 403
    assert [(n, k["entry"].network) for n, k in received] == [("request_blocked", "203.0.113.0/24")]


def test_expire_now_in_the_admin_announces_unblocked(received, admin_client, committed):
    ipblock.block("203.0.113.0/24")
    received.clear()
    with committed():
        admin_client.post(
            reverse("admin:django_bloom_blockedentry_changelist"),
            {"action": "expire_now", "_selected_action": [BlockedEntry.objects.get().pk]},
        )
    assert [(n, k["entry"].network) for n, k in received] == [("entry_unblocked", "203.0.113.0/24")]
    assert not ipblock.check_ip("203.0.113.9").blocked


async def _async_view(request):
    return HttpResponse("ok")
