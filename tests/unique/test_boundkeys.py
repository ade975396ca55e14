"""The validator's confirmation finds every row whose normalised value equals the input.

Filters here are declared BINDINGS on tests.testapp.Account; rows written before
the binding existed are backfilled by ``rebuild_from_source`` (the documented step).
"""

import pytest
from django import forms
from django.core.management import call_command
from django.db import transaction
from django.db.models.signals import post_delete, post_save
from django.test import override_settings

import django_bloom
from django_bloom.models import BloomFilter, BoundKey, BoundKeyState
from django_bloom.unique import sync
from django_bloom.validators import BloomUniqueFormMixin, BloomUniqueValidator
from tests.testapp.models import Account

BINDINGS = {
    "account-usernames": {"source": "testapp.Account.username", "normalizer": "username"},
    "account-emails": {"source": "testapp.Account.email", "normalizer": "email_ci"},
    # the local part keeps its case under "email": victim@x.org != Victim@x.org
    "account-emails-cs": {"source": "testapp.Account.email", "normalizer": "email"},
}
SMALL = {name: {**spec, "capacity": 10_000, "error_rate": 0.01} for name, spec in BINDINGS.items()}


@pytest.fixture
def bindings(bloom_prefix):
    with override_settings(DJANGO_BLOOM={"KEY_PREFIX": bloom_prefix, "BINDINGS": SMALL}):
        sync.connect_bindings()
        yield
    for name in SMALL:
        uid = f"django_bloom.unique.sync:{name}"
        post_save.disconnect(sender=Account, dispatch_uid=uid)
        post_delete.disconnect(sender=Account, dispatch_uid=uid)


def validator(name, field):
    return BloomUniqueValidator(name, "testapp.Account", field)


def taken(name, field, value, exclude_pk=None):
    return validator(name, field).is_taken(value, exclude_pk=exclude_pk)


def victim_variants(count):
    """``count`` case mixes of victim@x.org other than the exact one."""
    out = []
    for mask in range(1, 64):
        local = "".join(c.upper() if mask >> i & 1 else c for i, c in enumerate("victim"))
        out.append(f"{local}@X.org" if mask % 2 else f"{local}@x.org")
        if len(out) == count:
            return out
    raise AssertionError("not enough variants")


ROWS = [
    ("Straße", "strasse@example.org"),
    ("Élise", "elise@example.org"),
    ("Ｃａｒｏｌ", "carol@example.org"),  # stored un-normalised
    ("erin", "erin@BÜCHER.example"),
]


def create_rows_before_binding():
    """Rows that predate the binding: no signal saw them."""
    Account.objects.bulk_create([Account(username=u, email=e) for u, e in ROWS])
    Account.objects.bulk_create(
        [Account(username=f"v{i}", email=e) for i, e in enumerate(victim_variants(24))]
    )
    Account.objects.create(username="victim", email="victim@x.org")


@pytest.mark.django_db
def test_rebuild_backfills_keys_and_every_normalised_match_is_taken(bindings):
    create_rows_before_binding()
    for name in SMALL:
        sync.rebuild_from_source(name)  # creates the filter, fills it and the keys
    for value in ["STRASSE", "strasse", "straße", "élise", "ÉLISE", "carol", "CAROL"]:
        assert taken("account-usernames", "username", value), value
    assert taken("account-emails", "email", "erin@bücher.example")
    assert taken("account-emails", "email", "ERIN@BÜCHER.EXAMPLE")
    assert taken("account-emails-cs", "email", "victim@x.org")
    assert taken("account-emails-cs", "email", "victim@X.ORG")  # domain is lower-cased
    for value in ["strasser", "elisa", "carl"]:
        assert not taken("account-usernames", "username", value), value
    assert not taken("account-emails-cs", "email", "VICTIMS@x.org")


def account_form(**bindings):
    """A ModelForm of Account whose fields validate against ``field=binding`` filters."""

    class AccountForm(BloomUniqueFormMixin, forms.ModelForm):
        class Meta:
            model = Account
            fields = ["username", "email"]

        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            for field, name in bindings.items():
                self.fields[field].validators.append(validator(name, field))

    return AccountForm


AccountForm = account_form(username="account-usernames", email="account-emails")
VictimForm = account_form(email="account-emails-cs")


@pytest.mark.django_db
def test_modelform_refuses_every_normalised_duplicate(bindings):
    create_rows_before_binding()
    for name in SMALL:
        sync.rebuild_from_source(name)
    for username in ["STRASSE", "strasse", "élise", "ÉLISE", "carol"]:
        form = AccountForm(data={"username": username, "email": "new@example.org"})
        assert not form.is_valid(), username
        assert "already taken" in form.errors["username"][0]
    form = AccountForm(data={"username": "newbie", "email": "erin@bücher.example"})
    assert not form.is_valid() and "already taken" in form.errors["email"][0]
    form = VictimForm(data={"username": "newbie", "email": "victim@x.org"})
    assert not form.is_valid() and "already taken" in form.errors["email"][0]
    assert AccountForm(data={"username": "newbie", "email": "new@example.org"}).is_valid()
    # editing a row: its own value (in any normalised spelling) is not a duplicate
    row = Account.objects.get(username="Straße")
    edit = AccountForm(data={"username": "STRASSE", "email": row.email}, instance=row)
    assert edit.is_valid(), edit.errors


@pytest.mark.django_db(transaction=True)
def test_saves_and_deletes_keep_the_keys(bindings):
    sync.rebuild_from_source("account-usernames")  # empty table: keys complete at once
    with transaction.atomic():
        row = Account.objects.create(username="Straße", email="s@example.org")
    assert taken("account-usernames", "username", "STRASSE")
    assert not taken("account-usernames", "username", "STRASSE", exclude_pk=row.pk)
    row.username = "Élise"
    row.save()
    assert taken("account-usernames", "username", "élise")
    # the old value is free again: the filter still says "maybe", the key says no row
    assert not taken("account-usernames", "username", "strasse")
    with pytest.raises(RuntimeError), transaction.atomic():
        dave = Account.objects.create(username="Ｄａｖｅ", email="d@example.org")
        raise RuntimeError("roll back")
    assert not BoundKey.objects.filter(binding="account-usernames", object_pk=str(dave.pk)).exists()
    assert not taken("account-usernames", "username", "dave")
    row.delete()
    assert not taken("account-usernames", "username", "élise")
    assert not BoundKey.objects.filter(binding="account-usernames").exists()


@pytest.mark.django_db
def test_maybe_is_one_indexed_query_on_the_keys(bindings, django_assert_num_queries):
    create_rows_before_binding()
    sync.rebuild_from_source("account-usernames")
    check = validator("account-usernames", "username")
    django_bloom.get_filter("account-usernames")  # metadata cached, as in a warm process
    with django_assert_num_queries(1) as ctx:
        assert check.is_taken("STRASSE")
    sql = ctx.captured_queries[0]["sql"]
    assert "django_bloom_boundkey" in sql and "testapp_account" not in sql
    with django_assert_num_queries(0):
        assert not check.is_taken("someone-new")  # "absent": no query at all


@pytest.mark.django_db
def test_keys_are_found_while_redis_is_down(bindings):
    create_rows_before_binding()
    sync.rebuild_from_source("account-usernames")
    BloomFilter.objects.filter(name="account-usernames").update(cache_alias="dead")
    django_bloom.get_filter("account-usernames", refresh=True)
    assert taken("account-usernames", "username", "STRASSE")
    assert not taken("account-usernames", "username", "nobody")


@pytest.mark.django_db
def test_incomplete_keys_fall_back_to_every_candidate_and_warn(bindings):
    """Before the first backfill: the case-insensitive query, without a cap."""
    from django.core.checks import run_checks

    create_rows_before_binding()
    django_bloom.create_filter(
        "account-emails-cs",
        capacity=1000,
        kind="unique",
        source="testapp.Account.email",
        normalizer="email",
    )
    sync.add_rows("account-emails-cs", Account.objects.all())  # fills the filter only
    BoundKeyState.objects.filter(binding="account-emails-cs").delete()
    assert taken("account-emails-cs", "email", "victim@x.org")  # the 25th candidate
    messages = run_checks(include_deployment_checks=False, databases=["default"])
    warned = [m.hint for m in messages if m.id == "django_bloom.W010"]
    assert "Run: manage.py bloom rebuild account-emails-cs" in warned
    call_command("bloom", "rebuild", "account-emails-cs", verbosity=0)
    messages = run_checks(include_deployment_checks=False, databases=["default"])
    warned = [m.hint for m in messages if m.id == "django_bloom.W010"]
    assert "Run: manage.py bloom rebuild account-emails-cs" not in warned


@pytest.mark.django_db
def test_add_rows_with_values_marks_keys_incomplete_and_queryset_keeps_them(bindings):
    sync.rebuild_from_source("account-usernames")
    assert BoundKeyState.objects.get(binding="account-usernames").complete_at is not None
    rows = Account.objects.bulk_create(
        [Account(username=f"Bulk{i}", email=f"b{i}@x.org") for i in range(30)]
    )
    sync.add_rows("account-usernames", Account.objects.filter(pk__in=[r.pk for r in rows]))
    assert BoundKeyState.objects.get(binding="account-usernames").complete_at is not None
    assert taken("account-usernames", "username", "BULK7")
    Account.objects.bulk_create([Account(username="Zoë", email="z@x.org")])
    sync.add_rows("account-usernames", ["Zoë"])  # values: which row? unknown
    assert BoundKeyState.objects.get(binding="account-usernames").complete_at is None
    assert taken("account-usernames", "username", "zoë")  # fallback query finds it


@pytest.mark.django_db
def test_keys_of_another_normaliser_are_not_used(bindings):
    create_rows_before_binding()
    sync.rebuild_from_source("account-emails")  # keys made with email_ci
    BloomFilter.objects.filter(name="account-emails").update(stale_marks=1)
    django_bloom.get_filter("account-emails", refresh=True)  # the database decides
    check = BloomUniqueValidator("account-emails", "testapp.Account", "email", "identity")
    # identity: 'erin@bücher.example' is not 'erin@BÜCHER.example'; email_ci keys must not say so
    assert not check.is_taken("erin@bücher.example")
    assert check.is_taken("erin@BÜCHER.example")


@pytest.mark.django_db
def test_rebuild_removes_keys_of_rows_gone_without_signals(bindings):
    create_rows_before_binding()
    sync.rebuild_from_source("account-usernames")
    Account.objects.filter(username="Straße")._raw_delete("default")  # no signal
    assert taken("account-usernames", "username", "strasse")  # orphan key: safe direction
    sync.rebuild_from_source("account-usernames")
    assert not taken("account-usernames", "username", "strasse")
    assert BoundKey.objects.filter(binding="account-usernames").count() == Account.objects.count()


@pytest.mark.django_db
def test_keys_gone_incomplete_during_a_backfill_are_not_marked_complete(bindings, monkeypatch):
    from django_bloom.unique import boundkeys

    create_rows_before_binding()
    real = boundkeys.upsert_queryset

    def pass_then_update_behind_it(binding, rows):
        done = real(binding, rows)
        # A row the pass already read is changed without signals, then reported by value.
        Account.objects.filter(username="erin").update(username="Frank")
        sync.add_rows("account-usernames", ["Frank"])
        return done

    monkeypatch.setattr(boundkeys, "upsert_queryset", pass_then_update_behind_it)
    sync.rebuild_from_source("account-usernames")
    assert BoundKeyState.objects.get(binding="account-usernames").complete_at is None
    assert taken("account-usernames", "username", "FRANK")  # the fallback query finds it
    monkeypatch.undo()
    sync.rebuild_from_source("account-usernames")
    assert BoundKeyState.objects.get(binding="account-usernames").complete_at is not None
    assert taken("account-usernames", "username", "ＦＲＡＮＫ")  # keys again: NFKC too


@pytest.mark.django_db
def test_missing_filter_uses_the_bindings_normaliser_and_keys(bindings):
    create_rows_before_binding()
    sync.rebuild_from_source("account-usernames")
    django_bloom.get_filter("account-usernames").delete()  # the filter row is gone
    assert taken("account-usernames", "username", "STRASSE")
    assert not taken("account-usernames", "username", "nobody")
