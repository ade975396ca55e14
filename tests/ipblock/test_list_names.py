"""A blocklist's list name only ever names a blocklist filter (issue 34 item 3).

Another filter's name (a unique filter whose key was lost, a generic one, a family, a
name declared in BINDINGS) is refused before anything is written: ``NotABlocklist``
from the API, a form error in the admin, a ``CommandError`` from the command. The
filter is never written into nor rebuilt from blocklist rows."""

import pytest
from django.contrib.auth.models import Permission, User
from django.core.management import call_command
from django.core.management.base import CommandError
from django.urls import reverse

import django_bloom
from django_bloom import ipblock as blocklist
from django_bloom.exceptions import NotABlocklist
from django_bloom.models import BlockedEntry, BloomFilter

pytestmark = pytest.mark.django_db

ADD = "admin:django_bloom_blockedentry_add"


@pytest.fixture
def emails(redis_client):
    """The unique filter of a site's e-mails, its key lost (the validator rightly defers
    to the database): what the old code rebuilt from blocklist rows."""
    f = django_bloom.create_filter("account-emails", capacity=1000, kind="unique")
    f.add("taken@example.org")
    redis_client.delete(f.layout.segment.keys.bits)
    return f


@pytest.fixture
def entries_staff(client):
    """A staff user with every BlockedEntry permission and none on BloomFilter."""
    user = User.objects.create_user("entries", password="pw", is_staff=True)
    for action in ("add", "change", "delete", "view"):
        user.user_permissions.add(Permission.objects.get(codename=f"{action}_blockedentry"))
    client.force_login(user)
    return client


def other_filters():
    django_bloom.create_filter("plain", capacity=1000)
    django_bloom.create_filter("per-user", capacity=100, family=True)
    return ["account-emails", "plain", "per-user"]


def test_the_api_refuses_another_filters_name_and_writes_nothing(emails, redis_client):
    names = other_filters()
    plain = django_bloom.get_filter("plain")
    before = redis_client.get(plain.layout.segment.keys.bits)
    for name in names:
        with pytest.raises(NotABlocklist, match=name):
            blocklist.block("203.0.113.0/24", list_name=name)
        with pytest.raises(NotABlocklist):
            blocklist.import_netset(["198.51.100.0/24"], list_name=name)
        with pytest.raises(NotABlocklist):
            blocklist.rebuild_blocklist(name)
        with pytest.raises(NotABlocklist):
            blocklist.ensure_blocklist_filter(name)
    assert not BlockedEntry.objects.exists()
    assert not redis_client.exists(emails.layout.segment.keys.bits)  # not rebuilt
    assert redis_client.get(plain.layout.segment.keys.bits) == before  # not written
    assert BloomFilter.objects.get(name="account-emails").kind == "unique"


def test_a_name_declared_in_bindings_is_not_taken_by_a_blocklist(bloom_settings):
    spec = {"source": "testapp.Account.email", "normalizer": "email_ci", "capacity": 1000}
    bloom_settings(BINDINGS={"signups": spec})
    with pytest.raises(NotABlocklist, match="BINDINGS"):
        blocklist.block("203.0.113.0/24", list_name="signups")
    assert not BloomFilter.objects.filter(name="signups").exists()


def test_a_blocklist_of_another_name_still_works():
    blocklist.block("203.0.113.0/24", list_name="scrapers")
    blocklist.block("203.0.113.0/24", list_name="scrapers", reason="again")
    assert blocklist.check_ip("203.0.113.9", list_name="scrapers").blocked


def test_the_admin_form_refuses_another_filters_name(emails, entries_staff, redis_client):
    names = other_filters()
    for name in names:
        resp = entries_staff.post(
            reverse(ADD), {"network": "203.0.113.0/24", "reason": "", "list_name": name}
        )
        assert resp.status_code == 200, resp.status_code
        errors = resp.context["adminform"].form.errors
        assert "list_name" in errors and name in errors["list_name"][0], errors
    assert not BlockedEntry.objects.exists()
    assert not redis_client.exists(emails.layout.segment.keys.bits)
    resp = entries_staff.post(
        reverse(ADD), {"network": "203.0.113.0/24", "reason": "", "list_name": "ip-blocklist"}
    )
    assert resp.status_code == 302
    assert blocklist.check_ip("203.0.113.9").blocked


def test_the_command_refuses_another_filters_name(emails, tmp_path, redis_client):
    other_filters()
    netset = tmp_path / "list.netset"
    netset.write_text("203.0.113.0/24\n")
    for name in ("account-emails", "per-user"):
        with pytest.raises(CommandError, match=f"'{name}' is not a blocklist filter"):
            call_command("bloom", "import-blocklist", str(netset), "--list-name", name)
    assert not BlockedEntry.objects.exists()
    assert not redis_client.exists(emails.layout.segment.keys.bits)


def test_a_name_taken_between_the_form_and_the_save_is_an_error_not_a_500(
    emails, entries_staff, monkeypatch
):
    from django_bloom.ipblock.admin import BlockedEntryForm

    # As if another admin created the filter after this form was checked.
    monkeypatch.setattr(BlockedEntryForm, "clean_list_name", lambda form: "account-emails")
    resp = entries_staff.post(
        reverse(ADD), {"network": "203.0.113.0/24", "reason": "", "list_name": "x"}
    )
    assert resp.status_code == 200
    assert "Nothing was saved" in resp.content.decode()
    assert not BlockedEntry.objects.exists()
