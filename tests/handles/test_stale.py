"""A filter marked stale (it missed a write) stays stale until a rebuild that
began after the miss has swapped in: not while that rebuild runs, and not after
a rebuild during which another write was missed. Stale means the validator asks
the database, so neither case may let a taken value through as "unique"."""

import pytest
from django.core.exceptions import ValidationError
from django.db.models.signals import post_save
from django.test import override_settings

import django_bloom
from django_bloom.exceptions import RedisUnreachable
from django_bloom.models import BloomFilter
from django_bloom.services import forget_filters
from django_bloom.unique import sync
from django_bloom.validators import BloomUniqueValidator
from tests.testapp.models import Account
from tests.unique.test_sync import BINDINGS

pytestmark = pytest.mark.django_db
NAME = "account-emails"


@pytest.fixture
def bound(bloom_prefix):
    with override_settings(DJANGO_BLOOM={"KEY_PREFIX": bloom_prefix, "BINDINGS": BINDINGS}):
        sync.connect_bindings()
        sync.rebuild_from_source(NAME)  # creates the declared filter, backfills its keys
        yield BloomUniqueValidator(NAME, "testapp.Account", "email")
    post_save.disconnect(sender=Account, dispatch_uid=f"django_bloom.unique.sync:{NAME}")


def missed(email: str) -> None:
    """A row whose on-commit add failed: saved (its key written in its transaction), absent
    from the filter (this test's transaction never commits, so on_commit never runs),
    and the filter marked stale as the failed add would have."""
    Account.objects.create(username=email.split("@")[0], email=email)
    sync.mark_stale(NAME, RedisUnreachable("Redis was down"))


def is_stale() -> bool:
    return BloomFilter.objects.get(name=NAME).is_stale


def test_a_stale_filter_stays_stale_while_its_rebuild_runs(bound):
    missed("missed@example.com")
    seen = []

    def during(done: int) -> None:
        forget_filters()
        seen.append(is_stale())
        with pytest.raises(ValidationError):  # the live bits still lack it: ask the database
            bound("MISSED@example.com")

    sync.rebuild_from_source(NAME, progress=during)
    assert seen and all(seen)
    assert not is_stale()  # the rebuild read the row: the new bits hold it
    assert django_bloom.get_filter(NAME, refresh=True).contains("missed@example.com")


def test_a_write_missed_during_a_rebuild_keeps_the_filter_stale(bound):
    missed("first@example.com")

    def during(done: int) -> None:
        if not Account.objects.filter(email="second@example.com").exists():
            missed("second@example.com")  # after the source was read: not in the new bits

    sync.rebuild_from_source(NAME, progress=during)
    assert is_stale()
    forget_filters()
    with pytest.raises(ValidationError):
        bound("second@example.com")
    sync.rebuild_from_source(NAME)  # a rebuild that began after every miss
    assert not is_stale()


def test_direct_filter_rebuild_keeps_a_later_mark(bound):
    missed("early@example.com")
    handle = django_bloom.get_filter(NAME)

    def items():
        yield "early@example.com"
        sync.mark_stale(NAME, RedisUnreachable("missed while building"))

    handle.rebuild(items())
    assert is_stale()
