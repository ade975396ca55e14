"""Bound filters follow committed saves; rebuild from source keeps concurrent writes."""

import pytest
from django.db import transaction
from django.test import override_settings

import django_bloom
from django_bloom.exceptions import FilterNotFound
from django_bloom.models import BloomFilter
from django_bloom.unique import sync
from tests.conftest import declared_binding
from tests.testapp.models import Account

BINDINGS = {
    "account-emails": {
        "source": "testapp.Account.email",
        "normalizer": "email_ci",
        "capacity": 10_000,
        "error_rate": 0.01,
    }
}


@pytest.fixture
def bound(bloom_prefix):
    with declared_binding(bloom_prefix, "account-emails", BINDINGS["account-emails"]) as handle:
        yield handle


@pytest.mark.django_db(transaction=True)
def test_committed_saves_are_added_and_rolled_back_ones_are_not(bound):
    with transaction.atomic():
        Account.objects.create(username="a", email="A@Example.org")
    assert bound.contains("a@example.org")  # normalised on the way in
    with pytest.raises(RuntimeError):
        with transaction.atomic():
            Account.objects.create(username="b", email="b@example.org")
            raise RuntimeError("roll back")
    assert not bound.contains("b@example.org")
    assert not Account.objects.filter(username="b").exists()


@pytest.mark.django_db(transaction=True)
def test_changed_value_is_added_on_update(bound):
    row = Account.objects.create(username="c", email="c@example.org")
    row.email = "c2@example.org"
    row.save()
    assert bound.contains("c2@example.org")


@pytest.mark.django_db(transaction=True)
def test_failed_add_marks_the_filter_stale(bound):
    BloomFilter.objects.filter(name="account-emails").update(cache_alias="dead")
    django_bloom.get_filter("account-emails", refresh=True)
    Account.objects.create(username="d", email="d@example.org")
    assert BloomFilter.objects.get(name="account-emails").is_stale
    BloomFilter.objects.filter(name="account-emails").update(cache_alias="default")
    assert sync.rebuild_from_source("account-emails") == 1
    meta = BloomFilter.objects.get(name="account-emails")
    assert meta.rebuild_state == "done"
    assert django_bloom.get_filter("account-emails").contains("d@example.org")


@pytest.mark.django_db
def test_bulk_create_needs_add_rows(bound):
    Account.objects.bulk_create([Account(username=f"u{i}", email=f"U{i}@x.org") for i in range(50)])
    assert not any(bound.contains_many([f"u{i}@x.org" for i in range(50)]))  # no signals
    assert sync.add_rows("account-emails", Account.objects.all()) == 50
    assert all(bound.contains_many([f"u{i}@x.org" for i in range(50)]))


@pytest.mark.django_db
def test_rebuild_from_source_records_progress_and_keeps_concurrent_writes(bound):
    Account.objects.bulk_create(
        [Account(username=f"r{i}", email=f"r{i}@x.org") for i in range(25_000)]
    )
    seen = []
    writer = django_bloom.get_filter("account-emails")

    def progress(done):
        seen.append(done)
        writer.add("arrived-during-rebuild@x.org")

    assert sync.rebuild_from_source("account-emails", progress=progress) == 25_000
    meta = BloomFilter.objects.get(name="account-emails")
    assert meta.rebuild_state == "done" and meta.rebuild_done == 25_000
    assert meta.rebuild_total == 25_000 and meta.last_rebuild_at is not None
    assert seen[-1] == 25_000
    f = django_bloom.get_filter("account-emails")
    assert f.contains("arrived-during-rebuild@x.org")
    assert all(f.contains_many([f"r{i}@x.org" for i in range(0, 25_000, 7)]))


@pytest.mark.django_db
def test_rebuild_failure_is_recorded(bound):
    BloomFilter.objects.filter(name="account-emails").update(source="testapp.Nope.email")
    with pytest.raises(ValueError):
        sync.rebuild_from_source(django_bloom.get_filter("account-emails", refresh=True))


@pytest.fixture
def declared(bloom_prefix):
    """BINDINGS declared, no filter row yet (no ensure_bound_filters call)."""
    with override_settings(DJANGO_BLOOM={"KEY_PREFIX": bloom_prefix, "BINDINGS": BINDINGS}):
        yield


@pytest.mark.django_db
def test_first_rebuild_creates_a_declared_binding(declared):
    Account.objects.bulk_create([Account(username=f"n{i}", email=f"N{i}@x.org") for i in range(20)])
    assert not BloomFilter.objects.filter(name="account-emails").exists()
    assert sync.rebuild_from_source("account-emails") == 20
    meta = BloomFilter.objects.get(name="account-emails")
    assert (meta.kind, meta.source, meta.normalizer) == (
        "unique",
        "testapp.Account.email",
        "email_ci",
    )
    assert (meta.capacity, meta.error_rate) == (10_000, 0.01)
    assert django_bloom.get_filter("account-emails").contains("n7@x.org")


@pytest.mark.django_db
def test_bloom_rebuild_creates_a_declared_binding(declared):
    import io

    from django.core.management import call_command

    Account.objects.create(username="o", email="O@x.org")
    out = io.StringIO()
    call_command("bloom", "rebuild", "account-emails", stdout=out)
    assert "Created" in out.getvalue() and "1 items" in out.getvalue()
    assert django_bloom.get_filter("account-emails").contains("o@x.org")


@pytest.mark.django_db
def test_rebuild_of_an_undeclared_missing_filter_still_says_not_found(declared):
    with pytest.raises(FilterNotFound):
        sync.rebuild_from_source("nobody-declared-this")


def test_rebuild_help_says_it_creates_declared_bindings():
    from django_bloom.management.commands.bloom import Command

    parser = Command().create_parser("manage.py", "bloom")
    sub = next(a for a in parser._actions if a.dest == "subcommand")
    text = " ".join(sub.choices["rebuild"].format_help().split())
    assert "BINDINGS" in text and "creates it" in text
