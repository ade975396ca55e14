"""The allowlist in the database (``AllowedNetwork``, its admin), checked before the
blocklist beside the ``ALLOWLIST`` setting, with the same caching and hostile-input rules."""

from datetime import timedelta

import pytest
from django.contrib.auth.models import Permission, User
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from django_bloom import ipblock
from django_bloom.models import AllowedNetwork

pytestmark = pytest.mark.django_db

ADD = "admin:django_bloom_allowednetwork_add"
CHANGELIST = "admin:django_bloom_allowednetwork_changelist"


@pytest.fixture
def listed():
    ipblock.block("203.0.113.0/24")
    ipblock.block("2001:db8:1::/48")


def test_allowed_networks_win_over_the_blocklist(listed):
    ipblock.allow("203.0.113.8/29", reason="our monitor")
    ipblock.allow("2001:db8:1:2::/64")
    for address in (
        "203.0.113.9",
        "::ffff:203.0.113.15",
        "2001:db8:1:2::5",
        "2001:DB8:1:2::5%eth0",
    ):
        decision = ipblock.check_ip(address)
        assert not decision.blocked and decision.reason == ipblock.ALLOWLISTED, address
    for address in ("203.0.113.7", "203.0.113.16", "2001:db8:1:3::5"):
        assert ipblock.check_ip(address).blocked, address
    assert ipblock.disallow("203.0.113.8/29") == 1
    assert ipblock.check_ip("203.0.113.9").blocked
    assert ipblock.disallow("203.0.113.8/29") == 0


def test_the_setting_keeps_working_beside_the_rows(listed, bloom_settings):
    bloom_settings(ALLOWLIST=["203.0.113.0/28"])
    ipblock.allow("203.0.113.128/25")
    assert ipblock.check_ip("203.0.113.3").reason == ipblock.ALLOWLISTED
    assert ipblock.check_ip("203.0.113.200").reason == ipblock.ALLOWLISTED
    assert ipblock.check_ip("203.0.113.100").blocked
    assert ipblock.check_ip("127.0.0.1").blocked is False  # the default is replaced, as before


def test_expired_allowed_networks_allow_nothing(listed):
    ipblock.allow("203.0.113.0/24", expires_at=timezone.now() + timedelta(hours=1))
    assert ipblock.check_ip("203.0.113.9").reason == ipblock.ALLOWLISTED
    later = timezone.now() + timedelta(hours=2)
    assert ipblock.check_ip("203.0.113.9", now=later).blocked
    AllowedNetwork.objects.update(expires_at=timezone.now() - timedelta(seconds=1))
    ipblock.forget_caches()
    assert ipblock.check_ip("203.0.113.9").blocked


def test_hostile_and_bad_input_is_refused_and_writes_nothing():
    for bad in (
        "junk",
        "300.1.2.3",
        "10.0.0.0/33",
        "",
        None,
        "1.2.3.4 5.6.7.8",
        "x" * 5000,
        b"\xff",
    ):
        with pytest.raises(ValueError):
            ipblock.allow(bad)
    with pytest.raises(ValueError, match="future"):
        ipblock.allow("10.0.0.0/8", expires_at=timezone.now() - timedelta(seconds=1))
    assert not AllowedNetwork.objects.exists()
    entry = ipblock.allow("::ffff:10.1.2.3/104", reason="mapped")  # stored normalised
    assert entry.network == "10.0.0.0/8"
    assert ipblock.allow("10.9.9.9/8", reason="again").pk == entry.pk  # updated, not doubled


def test_a_bad_row_written_behind_its_back_is_skipped(listed, caplog):
    AllowedNetwork.objects.create(network="not a network")
    ipblock.allow("203.0.113.0/26")
    assert ipblock.check_ip("203.0.113.9").reason == ipblock.ALLOWLISTED
    assert "not a network" in caplog.text


def test_checking_costs_no_query_once_warm(listed, django_assert_num_queries):
    ipblock.allow("203.0.113.8/29")
    ipblock.check_ip("203.0.113.9")
    ipblock.check_ip("203.0.113.1")
    with django_assert_num_queries(0):
        assert ipblock.check_ip("203.0.113.10").reason == ipblock.ALLOWLISTED
        assert ipblock.check_ip("203.0.113.1").blocked
        assert ipblock.check_ip("198.51.100.1").reason == ipblock.NOT_LISTED


def test_the_middleware_lets_allowed_networks_through(listed, settings):
    settings.MIDDLEWARE = ["django_bloom.middleware.BlocklistMiddleware"]
    ipblock.allow("203.0.113.9")
    assert Client().get("/", REMOTE_ADDR="203.0.113.9").status_code != 403
    assert Client().get("/", REMOTE_ADDR="203.0.113.10").status_code == 403


# -- admin -----------------------------------------------------------------------------
def test_admin_adds_edits_and_deletes_allowed_networks(listed, admin_client):
    response = admin_client.post(
        reverse(ADD), {"network": "203.0.113.9", "reason": "our monitor", "expires_at_0": ""}
    )
    assert response.status_code == 302, response.content.decode()
    entry = AllowedNetwork.objects.get()
    assert entry.network == "203.0.113.9/32"
    assert ipblock.check_ip("203.0.113.9").reason == ipblock.ALLOWLISTED
    change = reverse("admin:django_bloom_allowednetwork_change", args=[entry.pk])
    admin_client.post(change, {"network": "203.0.113.10", "reason": "moved", "expires_at_0": ""})
    assert ipblock.check_ip("203.0.113.9").blocked
    assert ipblock.check_ip("203.0.113.10").reason == ipblock.ALLOWLISTED
    page = admin_client.get(reverse(CHANGELIST)).content.decode()
    assert "203.0.113.10/32" in page and "moved" in page
    delete = reverse("admin:django_bloom_allowednetwork_delete", args=[entry.pk])
    admin_client.post(delete, {"post": "yes"})
    assert not AllowedNetwork.objects.exists()
    assert ipblock.check_ip("203.0.113.10").blocked


def test_admin_refuses_bad_networks_and_past_expiries(admin_client):
    for data in (
        {"network": "junk", "reason": ""},
        {
            "network": "10.0.0.0/8",
            "reason": "",
            "expires_at_0": "2001-01-01",
            "expires_at_1": "0:00",
        },
    ):
        response = admin_client.post(reverse(ADD), data)
        assert response.status_code == 200 and "errornote" in response.content.decode()
    assert not AllowedNetwork.objects.exists()


def test_admin_needs_the_allowlist_permissions(listed):
    user = User.objects.create_user("viewer", password="pw", is_staff=True)
    user.user_permissions.add(Permission.objects.get(codename="view_allowednetwork"))
    client = Client()
    client.force_login(user)
    assert client.get(reverse(CHANGELIST)).status_code == 200
    assert client.get(reverse(ADD)).status_code == 403
    assert client.post(reverse(ADD), {"network": "203.0.113.9"}).status_code == 403
    assert not AllowedNetwork.objects.exists()
    stranger = User.objects.create_user("stranger", password="pw", is_staff=True)
    client.force_login(stranger)
    assert client.get(reverse(CHANGELIST)).status_code == 403
