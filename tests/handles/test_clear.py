"""A bound filter is never emptied: clearing it would let duplicates in (issue 10.3)."""

import io

import pytest
from django import forms
from django.core.management import CommandError, call_command
from django.db.models.signals import post_delete, post_save
from django.test import override_settings

import django_bloom
from django_bloom.exceptions import BloomError, FilterIsBound
from django_bloom.ipblock import block
from django_bloom.unique import sync
from django_bloom.validators import BloomUniqueValidator
from tests.testapp.models import Account

pytestmark = pytest.mark.django_db

BINDINGS = {
    "emails": {
        "source": "testapp.Account.email",
        "normalizer": "email_ci",
        "capacity": 10_000,
        "error_rate": 0.01,
    }
}


@pytest.fixture
def emails(bloom_prefix):
    with override_settings(DJANGO_BLOOM={"KEY_PREFIX": bloom_prefix, "BINDINGS": BINDINGS}):
        sync.connect_bindings()
        Account.objects.create(username="ann", email="ann@example.org")
        sync.rebuild_from_source("emails")
        yield django_bloom.get_filter("emails")
    post_save.disconnect(sender=Account, dispatch_uid="django_bloom.unique.sync:emails")
    post_delete.disconnect(sender=Account, dispatch_uid="django_bloom.unique.sync:emails")


class SignupForm(forms.Form):
    email = forms.EmailField(
        validators=[BloomUniqueValidator("emails", "testapp.Account", "email", "email_ci")]
    )


def test_clearing_a_bound_filter_is_refused_and_duplicates_stay_out(emails):
    with pytest.raises(FilterIsBound) as info:
        emails.clear()
    message = str(info.value)
    assert "testapp.Account.email" in message and "bloom rebuild emails" in message
    assert isinstance(info.value, BloomError)
    assert emails.contains("ann@example.org")  # nothing was emptied
    form = SignupForm(data={"email": "ANN@example.org"})
    assert not form.is_valid() and "already taken" in form.errors["email"][0]


def test_bloom_clear_refuses_a_bound_filter_and_suggests_rebuild(emails, monkeypatch):
    monkeypatch.setattr("builtins.input", lambda prompt: pytest.fail("must not ask"))
    with pytest.raises(CommandError) as info:
        call_command("bloom", "clear", "emails", "--yes", stdout=io.StringIO())
    assert info.value.returncode == 2
    assert "manage.py bloom rebuild emails" in str(info.value)
    assert emails.contains("ann@example.org")
    assert not SignupForm(data={"email": "ann@EXAMPLE.org"}).is_valid()


def test_bloom_clear_refuses_before_asking(emails, monkeypatch):
    monkeypatch.setattr("builtins.input", lambda prompt: pytest.fail("must not ask"))
    with pytest.raises(CommandError) as info:
        call_command("bloom", "clear", "emails", stdout=io.StringIO())
    assert info.value.returncode == 2


def test_a_blocklist_filter_is_never_cleared():
    block("203.0.113.0/24", reason="test")
    f = django_bloom.get_filter("ip-blocklist")
    with pytest.raises(FilterIsBound) as info:
        f.clear()
    assert "BlockedEntry" in str(info.value) and "bloom rebuild ip-blocklist" in str(info.value)


def test_an_unbound_filter_still_clears():
    f = django_bloom.create_filter("plain", capacity=1000)
    f.add("x")
    f.clear()
    assert not f.contains("x")
