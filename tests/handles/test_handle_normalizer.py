"""A handle applies its row's normaliser in every operation, as the CLI and the validator
do (issue 24, item 1); ``without_normalizer`` takes items already normalised, and no
path normalises twice."""

import asyncio

import pytest
from django.core.management import call_command
from django.db import transaction

import django_bloom
from django_bloom import testing
from django_bloom.normalizers import username
from django_bloom.unique import sync
from django_bloom.validators import BloomUniqueValidator
from tests.conftest import declared_binding
from tests.testapp.models import Account

EMAILS = {
    "source": "testapp.Account.email",
    "normalizer": "email_ci",
    "capacity": 10_000,
    "error_rate": 0.001,
}
NAMES = {
    "source": "testapp.Account.username",
    "normalizer": "username",
    "capacity": 10_000,
    "error_rate": 0.001,
}
# 'ß' + COMBINING ACUTE: username() gives 's' 's' U+0301; a second pass gives 's' 'ś' (U+015B).
NOT_IDEMPOTENT = "\u00df\u0301"


@pytest.fixture
def emails(bloom_prefix):
    with declared_binding(bloom_prefix, "account-emails", EMAILS) as handle:
        yield handle


@pytest.fixture
def names(bloom_prefix):
    with declared_binding(bloom_prefix, "account-names", NAMES) as handle:
        yield handle


@pytest.mark.django_db(transaction=True)
def test_bound_handle_answers_as_the_cli_and_the_validator_do(emails, capsys):
    with transaction.atomic():
        Account.objects.create(username="carol", email="carol@example.com")
    handle = django_bloom.get_filter("account-emails")
    assert handle.contains("Carol@Example.com")  # was False: the raw text was hashed
    assert "Carol@Example.com" in handle
    assert handle.contains_many(["Carol@Example.com", " CAROL@example.COM "]) == [True, True]
    call_command("bloom", "check", "account-emails", "Carol@Example.com")
    assert capsys.readouterr().out.strip() == "maybe present"
    validator = BloomUniqueValidator("account-emails", "testapp.Account", "email")
    assert validator.is_taken("Carol@Example.com")


@pytest.mark.django_db(transaction=True)
def test_every_operation_normalises_writes_and_batches_too(emails):
    handle = django_bloom.get_filter("account-emails")
    assert handle.add("Dave@Example.com") is True
    assert handle.add("dave@example.com") is False  # the same item, once normalised
    assert handle.add_many(["Eve@X.org", "eve@x.org"]) == [True, False]
    raw = handle.without_normalizer
    assert raw.contains_many(["dave@example.com", "eve@x.org"]) == [True, True]
    assert raw.contains_many(["Dave@Example.com", "Eve@X.org"]) == [False, False]
    handle.validate_items(["Any@Case.org"])
    # bytes and ints are not text: passed as they are
    assert handle.add(b"Raw-Bytes") is True and not raw.contains("raw-bytes")


@pytest.mark.django_db(transaction=True)
def test_async_operations_normalise(emails):
    handle = django_bloom.get_filter("account-emails")

    async def run():
        added = await handle.aadd("Frank@Example.com")
        many = await handle.aadd_many(["Grace@Example.com", "grace@example.com"])
        found = await handle.acontains("FRANK@example.com")
        both = await handle.acontains_many(["frank@EXAMPLE.com", "GRACE@example.com"])
        raw = await handle.without_normalizer.acontains("Frank@Example.com")
        return added, many, found, both, raw

    assert asyncio.run(run()) == (True, [True, False], True, [True, True], False)


@pytest.mark.django_db
def test_family_members_normalise():
    family = django_bloom.create_filter(
        "pushed", capacity=1000, error_rate=0.01, family=True, normalizer="email_ci"
    )
    member = django_bloom.get_filter("pushed", member=42)
    member.add("Heidi@Example.com")
    assert member.contains("heidi@example.com")
    assert member.without_normalizer.contains("heidi@example.com")
    assert not django_bloom.get_filter("pushed", member=43).contains("heidi@example.com")
    family.delete()


@pytest.mark.django_db
def test_counting_remove_normalises():
    f = django_bloom.create_filter(
        "c", capacity=1000, error_rate=0.01, layout="counting", normalizer="email_ci"
    )
    f.add("Ivan@Example.com")
    assert f.remove("IVAN@example.com") is True
    assert not f.contains("ivan@example.com")
    f.add_many(["a@b.c", "d@e.f"])
    assert f.remove_many(["A@B.C", "D@E.F"]) == [True, True]


@pytest.mark.django_db
def test_public_rebuild_normalises_and_the_bindings_rebuild_does_not_twice(names):
    Account.objects.bulk_create([Account(username=NOT_IDEMPOTENT, email="x@example.org")])
    assert username(username(NOT_IDEMPOTENT)) != username(NOT_IDEMPOTENT)  # why it matters
    assert sync.rebuild_from_source("account-names") == 1
    handle = django_bloom.get_filter("account-names", refresh=True)
    assert handle.without_normalizer.contains(username(NOT_IDEMPOTENT))
    assert handle.contains(NOT_IDEMPOTENT)
    validator = BloomUniqueValidator("account-names", "testapp.Account", "username")
    assert validator.is_taken(NOT_IDEMPOTENT)
    handle.rebuild(["Judy"])  # the public rebuild normalises like every other operation
    assert handle.without_normalizer.contains("judy") and handle.contains("JUDY")


@pytest.mark.django_db(transaction=True)
def test_binding_writes_and_prefill_are_normalised_once(names):
    with transaction.atomic():
        Account.objects.create(username=NOT_IDEMPOTENT, email="y@example.org")
    raw = django_bloom.get_filter("account-names").without_normalizer
    assert raw.contains(username(NOT_IDEMPOTENT))  # once
    testing.prefill("account-names", ["Zed\u00df\u0301"])
    assert raw.contains(username("Zed\u00df\u0301"))
    call_command("bloom", "add", "account-names", "Kim\u00df\u0301", verbosity=0)
    assert raw.contains(username("Kim\u00df\u0301"))


@pytest.mark.django_db
def test_an_unknown_normalizer_fails_the_operation_not_the_lookup():
    from django_bloom.models import BloomFilter

    django_bloom.create_filter("odd", capacity=100, error_rate=0.01)
    BloomFilter.objects.filter(name="odd").update(normalizer="no.such.module.fn")
    handle = django_bloom.get_filter("odd", refresh=True)  # still a handle: stats, delete...
    with pytest.raises(ValueError, match="filter 'odd': unknown normalizer"):
        handle.add("x")
    with pytest.raises(ValueError, match="unknown normalizer"):
        handle.contains_many(["x", "y"])
    assert handle.without_normalizer.add("x") is True


@pytest.mark.django_db
def test_still_one_round_trip(sent_commands):
    f = django_bloom.create_filter("rt", capacity=1000, error_rate=0.01, normalizer="username")
    sent_commands.clear()
    f.add("Alice")
    f.contains("ALICE")
    f.add_many(["Bob", "Carol"])
    f.contains_many(["BOB", "carol"])
    assert len(sent_commands) == 4


@pytest.mark.django_db
def test_without_normalizer_follows_its_handle_after_a_resize():
    """The view holds only its handle: when the handle re-binds (a resize elsewhere), the
    view's next operation runs on the new key, never on a stale copy."""
    handle = django_bloom.create_filter(
        "moved", capacity=100, error_rate=0.01, normalizer="email_ci"
    )
    raw = handle.without_normalizer
    other = django_bloom.get_filter("moved", refresh=True)
    assert other is not handle
    other.rebuild(["Amy@Example.com"], capacity=1000)
    assert raw.contains("amy@example.com")  # missed the old key, re-read the row, retried
    assert raw.meta is handle.meta and raw.meta.capacity == 1000
    assert raw.add("bob@example.com") is True and handle.contains("BOB@example.com")
