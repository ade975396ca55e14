"""BloomUniqueValidator: no query when absent, one when maybe, right when Redis is gone."""

import pytest
from django import forms
from django.core.exceptions import ValidationError
from django.db.migrations.writer import MigrationWriter

import django_bloom
from django_bloom import counters
from django_bloom.models import BloomFilter
from django_bloom.validators import BloomUniqueFormMixin, BloomUniqueValidator, editing
from tests.testapp.models import Account

pytestmark = pytest.mark.django_db


def user_filter(normalizer="username", name="usernames", field="username", **kw):
    return django_bloom.create_filter(
        name,
        capacity=10_000,
        kind="unique",
        source=f"testapp.Account.{field}",
        normalizer=normalizer,
        **kw,
    )


def register(username, email=None):
    from django_bloom.unique import sync

    row = Account.objects.create(username=username, email=email or f"{username}@example.org")
    sync.add_rows("usernames", [username])
    return row


def test_absent_makes_no_query(django_assert_num_queries):
    user_filter()
    register("alice")
    validator = BloomUniqueValidator("usernames", "testapp.Account", "username")
    django_bloom.get_filter("usernames")  # metadata cached, as in a warm process
    with django_assert_num_queries(0):
        validator("bob")  # valid, no database query


def test_maybe_is_confirmed_with_exactly_one_query(django_assert_num_queries):
    user_filter()
    register("alice")
    validator = BloomUniqueValidator("usernames", "testapp.Account", "username")
    django_bloom.get_filter("usernames")
    with django_assert_num_queries(1):
        with pytest.raises(ValidationError) as info:
            validator("alice")
    assert info.value.code == "unique"


def test_case_and_unicode_variants_are_caught():
    user_filter()
    register("Alice")
    validator = BloomUniqueValidator("usernames", "testapp.Account", "username")
    for variant in ["alice", "ALICE", "Ａｌｉｃｅ", "aLiCe"]:
        with pytest.raises(ValidationError):
            validator(variant)
    validator("alicia")


def test_false_positive_is_contradicted_by_the_database_and_counted():
    f = user_filter()
    f.add("ghost")  # in the filter, not in the table: what a false positive looks like
    validator = BloomUniqueValidator("usernames", "testapp.Account", "username")
    validator("ghost")  # valid: the database has no such row
    validator("nobody")
    register("real")
    with pytest.raises(ValidationError):
        validator("real")
    stats = counters.read_counters(django_bloom.get_filter("usernames"))
    assert stats["false_positives"] == 1
    assert stats["db_skipped"] == 1
    assert stats["db_confirmed"] == 1
    assert stats["observed_fpr"] == pytest.approx(0.5)


def test_edited_instance_does_not_collide_with_itself():
    user_filter()
    row = register("carol")
    validator = BloomUniqueValidator("usernames", "testapp.Account", "username")
    with editing(row):
        validator("carol")  # its own value
        validator("CAROL")
    other = register("dave")
    with editing(other), pytest.raises(ValidationError):
        validator("carol")


def test_redis_down_falls_back_to_the_database():
    user_filter(cache_alias="default")
    register("erin")
    BloomFilter.objects.filter(name="usernames").update(cache_alias="dead")
    django_bloom.get_filter("usernames", refresh=True)
    validator = BloomUniqueValidator("usernames", "testapp.Account", "username")
    with pytest.raises(ValidationError):
        validator("Erin")
    validator("frank")


def test_lost_key_falls_back_to_the_database(redis_client):
    f = user_filter()
    register("gina")
    redis_client.delete(f.layout.segment.keys.bits)
    validator = BloomUniqueValidator("usernames", "testapp.Account", "username")
    with pytest.raises(ValidationError):
        validator("GINA")
    validator("hank")


def test_missing_filter_falls_back_to_the_database():
    Account.objects.create(username="ivy", email="ivy@example.org")
    validator = BloomUniqueValidator("never-created", "testapp.Account", "username", "username")
    with pytest.raises(ValidationError):
        validator("IVY")


def test_stale_filter_is_not_trusted(django_assert_num_queries):
    user_filter()
    Account.objects.create(username="jo", email="jo@example.org")  # missed by the filter
    BloomFilter.objects.filter(name="usernames").update(stale_marks=1)
    django_bloom.get_filter("usernames", refresh=True)
    validator = BloomUniqueValidator("usernames", "testapp.Account", "username")
    with pytest.raises(ValidationError):
        validator("jo")


def test_too_long_values_are_not_normalised(django_assert_num_queries):
    user_filter()
    validator = BloomUniqueValidator("usernames", "testapp.Account", "username", max_length=150)
    django_bloom.get_filter("usernames")
    with django_assert_num_queries(0):
        validator("ﷺ" * 10_000)  # NFKC would expand this 18x; left to MaxLengthValidator


def test_validator_deconstructs_for_migrations():
    validator = BloomUniqueValidator("usernames", "testapp.Account", "username", "username", 150)
    path, args, kwargs = validator.deconstruct()
    assert path == "django_bloom.validators.BloomUniqueValidator"
    assert BloomUniqueValidator(*args, **kwargs) == validator
    source, imports = MigrationWriter.serialize(validator)
    assert "django_bloom.validators.BloomUniqueValidator" in source


class SignupForm(forms.Form):
    email = forms.EmailField(
        validators=[BloomUniqueValidator("emails", "testapp.Account", "email", "email_ci")]
    )


class AccountForm(BloomUniqueFormMixin, forms.ModelForm):
    class Meta:
        model = Account
        fields = ["username", "email"]

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["email"].validators.append(
            BloomUniqueValidator("emails", "testapp.Account", "email", "email_ci")
        )


def test_form_field_use_and_modelform_edit():
    django_bloom.create_filter(
        "emails", capacity=1000, source="testapp.Account.email", normalizer="email_ci"
    )
    from django_bloom.unique import sync

    row = Account.objects.create(username="kim", email="Kim@Example.org")
    sync.add_rows("emails", [row.email])
    form = SignupForm(data={"email": "KIM@example.ORG"})
    assert not form.is_valid()
    assert "already taken" in form.errors["email"][0]
    assert SignupForm(data={"email": "lee@example.org"}).is_valid()
    edit = AccountForm(data={"username": "kim", "email": "kim@example.org"}, instance=row)
    assert edit.is_valid(), edit.errors


class UsernameForm(forms.Form):
    username = forms.CharField(
        validators=[BloomUniqueValidator("usernames", "testapp.Account", "username")]
    )


@pytest.mark.parametrize("filter_exists", [True, False])
def test_lone_surrogate_is_a_field_error_not_an_exception(filter_exists):
    import json

    if filter_exists:
        user_filter()
        register("alice")
    value = json.loads('"al\\ud800ice"')  # what a JSON API hands a form
    form = UsernameForm(data={"username": value})
    assert not form.is_valid()
    assert form.errors["username"][0] == "This value contains characters that cannot be stored."
    assert UsernameForm(data={"username": "bob"}).is_valid()
    validator = BloomUniqueValidator("usernames", "testapp.Account", "username")
    assert validator.is_taken(value) is False  # no row can hold it
