"""Django's own uniqueness checks beside a bound filter (issue 33), on every path Django
runs them: a ModelForm as the admin builds it (no form mixin), a ModelForm with
``BloomUniqueFormMixin``, ``Model.full_clean()``, the admin's add and change views;
``UserCreationForm`` and the admin's ``auth.User`` add form. Each outcome is counted in
queries reading the model's table by the checked column:

- a certainly new value: 0 (Django's query for that field is left out);
- taken in another letter case: a field error with the validator's message (no KeyError, no 500);
- "maybe", Redis down, a stale filter, editing a row, a value changed by ``clean()``,
  constraints the filter cannot speak for: Django's own checks, exactly as without the app.
"""

import pytest
from django import forms
from django.contrib.auth.forms import UserCreationForm
from django.contrib.auth.models import User
from django.core.exceptions import ValidationError
from django.db import connection
from django.forms import modelform_factory
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import translation

import django_bloom
from django_bloom.models import BloomFilter
from django_bloom.testing import prefill
from django_bloom.unique import sync
from django_bloom.validators import BloomUniqueFormMixin
from tests.conftest import declared_binding
from tests.signup_urls import BloomUsernames
from tests.testapp.models import Customer, Member, Seat

pytestmark = [pytest.mark.django_db, pytest.mark.urls("tests.signup_urls")]

FILTERS = {Member: "members", Customer: "customers", Seat: "seats"}
# Plain Django's lookups for one new email: unique=True (1); UniqueConstraint(Lower("email"))
# and UniqueConstraint("email") (2); tenant+email and the conditional constraint (2: a
# filter of emails cannot speak for them).
DJANGO_CHECKS = {Member: 1, Customer: 2, Seat: 2}
TAKEN = {"en": "This email is already taken.", "zh-hans": "该email已被占用。"}


def lookups(captured, table, column):
    """The queries that read ``table`` by ``column`` (after WHERE): uniqueness checks and
    the validator's fallback; not the admin's session user, not INSERTs."""
    return [
        q["sql"]
        for q in captured.captured_queries
        if q["sql"].startswith("SELECT")
        and f'"{table}"' in q["sql"]
        and f'"{column}"' in q["sql"].partition(" WHERE ")[2]
    ]


@pytest.fixture(autouse=True)
def fast_hashing(settings):
    """The admin user and the admin's added users: no 0.2 s PBKDF2 each."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture(params=[Member, Customer, Seat], ids=lambda model: model.__name__)
def model(request, bloom_prefix):
    """The model, its email filter bound (BINDINGS), rebuilt (keys complete) and warm."""
    name = FILTERS[request.param]
    spec = {"source": f"testapp.{request.param.__name__}.email", "normalizer": "email_ci"}
    with declared_binding(bloom_prefix, name, {**spec, "capacity": 1000}):
        sync.rebuild_from_source(name)
        django_bloom.get_filter(name, refresh=True)
        yield request.param


def data(model, email):
    return {"tenant": "acme", "email": email, "active": True} if model is Seat else {"email": email}


def register(model, email, in_filter=True):
    """A committed row (its bound key is written); added to the filter, as on commit."""
    row = model._base_manager.create(**data(model, email))
    if in_filter:
        prefill(FILTERS[model], [email])
    return row


class MixinForm(BloomUniqueFormMixin, forms.ModelForm):
    pass


def form_errors(form_class, model, values, instance):
    form = modelform_factory(model, form=form_class, fields=list(values))(
        data=values, instance=instance
    )
    form.is_valid()
    return form.errors


def via_modelform(client, model, values, instance=None):
    return form_errors(forms.ModelForm, model, values, instance)


def via_mixin_form(client, model, values, instance=None):
    return form_errors(MixinForm, model, values, instance)


def via_full_clean(client, model, values, instance=None):
    row = instance or model()
    for key, value in values.items():
        setattr(row, key, value)
    try:
        row.full_clean()
    except ValidationError as exc:
        return exc.message_dict
    return {}


def via_admin(client, model, values, instance=None):
    name = model._meta.model_name
    if instance is None:
        url = reverse(f"admin:testapp_{name}_add")
    else:
        url = reverse(f"admin:testapp_{name}_change", args=[instance.pk])
    response = client.post(url, {k: "on" if v is True else v for k, v in values.items()})
    assert response.status_code in (200, 302), response.status_code  # never a 500
    return response.context["adminform"].form.errors if response.status_code == 200 else {}


PATHS = [via_modelform, via_mixin_form, via_full_clean, via_admin]


@pytest.fixture(params=PATHS, ids=lambda path: path.__name__[4:])
def validate(request, model):
    """``validate(email, instance=None)`` on the path: (errors, lookups of the table's email)."""
    client = request.getfixturevalue("admin_client") if request.param is via_admin else None

    def run(email, instance=None):
        with CaptureQueriesContext(connection) as captured:
            errors = request.param(client, model, data(model, email), instance)
        return errors, lookups(captured, model._meta.db_table, "email")

    return run


def test_a_new_value_makes_no_query_of_its_own(validate, model):
    errors, queries = validate("new@example.org")
    assert not errors
    assert len(queries) == {Member: 0, Customer: 0, Seat: 2}[model], queries


@pytest.mark.parametrize("language", ["en", "zh-hans"])
def test_a_value_taken_in_another_case_is_a_field_error_with_the_validators_message(
    validate, model, language
):
    register(model, "Taken@Example.org")
    with translation.override(language):
        errors, _ = validate("taken@EXAMPLE.org")
        assert {key: list(value) for key, value in errors.items()} == {"email": [TAKEN[language]]}


def test_maybe_keeps_djangos_checks(validate, model):
    prefill(FILTERS[model], ["new@example.org"])  # a false positive: in the filter, no row
    errors, queries = validate("new@example.org")
    assert not errors
    assert len(queries) == DJANGO_CHECKS[model], queries


@pytest.mark.parametrize("change", [{"cache_alias": "dead"}, {"stale_marks": 1}])
def test_redis_down_or_a_stale_filter_keeps_djangos_checks(validate, model, change):
    BloomFilter.objects.filter(name=FILTERS[model]).update(**change)
    django_bloom.get_filter(FILTERS[model], refresh=True)
    errors, queries = validate("new@example.org")
    assert not errors
    assert len(queries) == DJANGO_CHECKS[model], queries


def test_editing_a_row_with_its_own_value_is_valid_and_keeps_djangos_checks(validate, model):
    row = register(model, "own@example.org")
    errors, queries = validate("OWN@example.org", instance=row)
    assert not errors
    assert len(queries) == DJANGO_CHECKS[model], queries
    other = register(model, "other@example.org")
    errors, _ = validate("Own@Example.org", instance=other)
    assert list(errors) == ["email"]
    register(model, "hidden@example.org", in_filter=False)  # a row the filter has not seen
    errors, queries = validate("hidden@example.org", instance=row)  # an update: not certified
    assert errors and len(queries) == DJANGO_CHECKS[model], queries


def test_a_value_changed_after_the_check_keeps_djangos_checks(validate, model, monkeypatch):
    register(model, "hidden@example.org", in_filter=False)  # a row the filter has not seen

    def clean(self):
        self.email = "hidden@example.org"

    monkeypatch.setattr(model, "clean", clean)
    errors, queries = validate("new@example.org")
    assert errors  # Django's own check found the row
    assert len(queries) == DJANGO_CHECKS[model], queries


@pytest.mark.parametrize("model", [Member], indirect=True)
@pytest.mark.parametrize("validate", [via_full_clean], indirect=True)
def test_a_unique_together_naming_the_field_keeps_both_queries(validate, model, monkeypatch):
    """Excluding the field from validate_unique would drop the together check too (a form
    without the other field excludes it: Django itself skips that check there)."""
    monkeypatch.setattr(Member._meta, "unique_together", (("email", "deleted"),))
    errors, queries = validate("new@example.org")
    assert not errors
    assert len(queries) == 2, queries


def test_soft_deleted_rows_stay_taken_after_a_rebuild(bloom_prefix):
    """``bloom rebuild`` reads ``_base_manager``: a row its default manager hides keeps its
    value (the database's unique index does)."""
    spec = {"source": "testapp.Member.email", "normalizer": "email_ci", "capacity": 1000}
    Member.everyone.create(email="gone@example.org", deleted=True)
    with declared_binding(bloom_prefix, "members", spec) as handle:
        sync.rebuild_from_source("members")
        assert handle.contains("gone@example.org")
        with pytest.raises(ValidationError) as info:
            Member(email="Gone@Example.org").full_clean()
    assert info.value.message_dict == {"email": [TAKEN["en"]]}


# -- auth.User: UserCreationForm (its case-insensitive query) and the admin's add form --
class SignupForm(BloomUsernames, UserCreationForm):
    pass


class ReservedNamesForm(SignupForm):
    def clean_username(self):
        if self.cleaned_data.get("username") == "root":
            raise ValidationError("reserved")
        return super().clean_username()


PASSWORD = {"password1": "a-long-enough-pass-1", "password2": "a-long-enough-pass-1"}


def signup_form(client, username, form_class=SignupForm):
    form = form_class(data={"username": username, **PASSWORD})
    form.is_valid()
    return form.errors


def admin_add_user(client, username):
    values = {"username": username, "usable_password": "true", **PASSWORD}
    response = client.post(reverse("admin:auth_user_add"), values)
    assert response.status_code in (200, 302), response.status_code
    return response.context["adminform"].form.errors if response.status_code == 200 else {}


@pytest.fixture
def usernames(admin_client, bloom_prefix):
    """The "usernames" binding of auth.User.username, rebuilt (the admin user is in it)."""
    spec = {"source": "auth.User.username", "normalizer": "username", "capacity": 1000}
    with declared_binding(bloom_prefix, "usernames", spec):
        sync.rebuild_from_source("usernames")
        django_bloom.get_filter("usernames", refresh=True)
        yield admin_client


@pytest.fixture(params=[signup_form, admin_add_user], ids=["UserCreationForm", "admin"])
def add_user(request, usernames):
    """``add_user(name)``: (errors, lookups of auth_user by username) on the path."""

    def run(username):
        with CaptureQueriesContext(connection) as captured:
            errors = request.param(usernames, username)
        return errors, lookups(captured, "auth_user", "username")

    return run


def test_user_creation_makes_no_query_for_a_new_name(add_user):
    errors, queries = add_user("newcomer")
    assert not errors
    assert queries == []


def test_user_creation_refuses_a_taken_name_in_another_case(add_user):
    User.objects.create_user("Carol")
    prefill("usernames", ["Carol"])
    errors, _ = add_user("CAROL")
    assert errors["username"] == ["This username is already taken."]


@pytest.mark.parametrize("outcome", ["maybe", "redis down", "stale", "dotless i"])
def test_user_creation_keeps_djangos_checks_unless_certified(add_user, outcome):
    name = "newcomer"
    if outcome == "maybe":
        prefill("usernames", [name])
    elif outcome == "dotless i":
        name = "ıvan"  # U+0131: SQL's UPPER() makes it IVAN, casefold() does not
    else:
        change = {"cache_alias": "dead"} if outcome == "redis down" else {"stale_marks": 1}
        BloomFilter.objects.filter(name="usernames").update(**change)
        django_bloom.get_filter("usernames", refresh=True)
    errors, queries = add_user(name)
    assert not errors
    # clean_username's iexact and validate_unique's exact; "ıvan" is certified for the
    # exact one alone (any normaliser covers "=")
    assert len(queries) == (1 if outcome == "dotless i" else 2), queries
    assert "LIKE" in queries[0] or "UPPER" in queries[0]


def test_a_forms_own_clean_username_still_runs_for_a_certified_name(usernames):
    assert signup_form(usernames, "root", ReservedNamesForm)["username"] == ["reserved"]
    assert not signup_form(usernames, "rooted", ReservedNamesForm)
