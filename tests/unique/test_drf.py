"""The DRF validator through a real DRF view (tests/drf_urls.py): the form validator's
decisions (0 queries when absent, one when maybe, the database when Redis cannot
answer), DRF's conventions (field errors, code "unique", updates)."""

import json

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

rest_framework = pytest.importorskip("rest_framework", reason="DRF TEST SKIPPED: no DRF")

from rest_framework.test import APIClient  # noqa: E402

import django_bloom  # noqa: E402
from django_bloom.contrib.drf import BloomUniqueValidator  # noqa: E402
from django_bloom.models import BloomFilter  # noqa: E402
from django_bloom.unique import sync  # noqa: E402
from tests.conftest import declared_binding  # noqa: E402
from tests.drf_urls import AccountSerializer  # noqa: E402
from tests.testapp.models import Account  # noqa: E402

pytestmark = [pytest.mark.django_db, pytest.mark.urls("tests.drf_urls")]

BINDING = {"source": "testapp.Account.email", "normalizer": "email_ci", "capacity": 10_000}


@pytest.fixture
def emails(bloom_prefix):
    """The "emails" binding, its keys backfilled (the validator's one-query path)."""
    with declared_binding(bloom_prefix, "emails", BINDING) as handle:
        sync.rebuild_from_source("emails")
        django_bloom.get_filter("emails", refresh=True)  # metadata cached: a warm process
        yield handle


@pytest.fixture
def api(django_capture_on_commit_callbacks):
    """An APIClient whose saves reach the filter (the binding adds on commit)."""
    client = APIClient()

    def call(method, url, data):
        with django_capture_on_commit_callbacks(execute=True):
            return getattr(client, method)(url, data, format="json")

    return call


def validator_queries(queries):
    """The queries the email validator made: reads of emails or of their bound keys
    (the username field keeps DRF's own UniqueValidator: one query of its own)."""
    return [
        q["sql"]
        for q in queries
        if q["sql"].lstrip().upper().startswith("SELECT")
        and ('"email"' in q["sql"] or "boundkey" in q["sql"])
    ]


def test_a_new_email_is_created_without_a_query_a_taken_one_is_a_field_error(emails, api):
    with CaptureQueriesContext(connection) as captured:
        created = api("post", "/api/accounts/", {"username": "kim", "email": "Kim@Example.org"})
    assert created.status_code == 201, created.data
    assert validator_queries(captured.captured_queries) == []
    assert emails.contains("kim@example.org")  # the binding added it on commit

    with CaptureQueriesContext(connection) as captured:
        taken = api("post", "/api/accounts/", {"username": "kim2", "email": "KIM@example.ORG"})
    assert taken.status_code == 400
    assert taken.data == {"email": ["This email is already taken."]}
    assert taken.data["email"][0].code == "unique"
    assert len(validator_queries(captured.captured_queries)) == 1  # "maybe": one indexed query
    assert Account.objects.count() == 1


def test_the_serializer_validates_a_new_email_with_zero_queries(emails, django_assert_num_queries):
    Account.objects.create(username="lee", email="lee@example.org")
    serializer = AccountSerializer(data={"username": "max", "email": "max@example.org"})
    with django_assert_num_queries(0):
        serializer.fields["email"].run_validation("max@example.org")
    assert serializer.is_valid(), serializer.errors


def test_an_update_keeps_its_own_email_but_not_anothers(emails, api):
    own = api("post", "/api/accounts/", {"username": "ann", "email": "ann@example.org"}).data
    api("post", "/api/accounts/", {"username": "bob", "email": "bob@example.org"})
    url = f"/api/accounts/{own['id']}/"
    same = api("put", url, {"username": "ann", "email": "ANN@example.org"})
    assert same.status_code == 200, same.data
    patched = api("patch", url, {"email": "ann@example.org"})
    assert patched.status_code == 200, patched.data
    stolen = api("patch", url, {"email": "Bob@example.org"})
    assert stolen.status_code == 400
    assert stolen.data["email"][0].code == "unique"
    assert Account.objects.get(pk=own["id"]).email == "ann@example.org"


def test_redis_unavailable_the_database_decides(emails, api):
    api("post", "/api/accounts/", {"username": "cai", "email": "cai@example.org"})
    BloomFilter.objects.filter(name="emails").update(cache_alias="dead")
    django_bloom.get_filter("emails", refresh=True)
    taken = api("post", "/api/accounts/", {"username": "cai2", "email": "CAI@example.org"})
    assert taken.status_code == 400 and taken.data["email"][0].code == "unique"
    new = api("post", "/api/accounts/", {"username": "dee", "email": "dee@example.org"})
    assert new.status_code == 201, new.data


def test_a_stale_filter_is_not_trusted(emails, api):
    # A row the filter missed (saved without its on-commit add), and the mark a missed
    # write leaves: "absent" from the filter must not be believed.
    Account.objects.create(username="eve", email="eve@example.org")
    assert not emails.contains("eve@example.org")
    BloomFilter.objects.filter(name="emails").update(stale_marks=1)
    django_bloom.get_filter("emails", refresh=True)
    taken = api("post", "/api/accounts/", {"username": "eve2", "email": "Eve@example.org"})
    assert taken.status_code == 400 and taken.data["email"][0].code == "unique"


def test_a_lone_surrogate_is_a_field_error_not_a_500(emails):
    body = '{"username": "x", "email": "a\\ud800@example.org"}'
    response = APIClient().post("/api/accounts/", body, content_type="application/json")
    assert response.status_code == 400
    assert "email" in json.loads(response.content)


def test_field_defaults_to_the_serializer_fields_source_and_compares_by_value():
    a = BloomUniqueValidator("emails", Account, normalizer="email_ci")
    assert a.model == "testapp.Account" and a.field is None
    assert a == BloomUniqueValidator("emails", "testapp.Account", normalizer="email_ci")
    assert a != BloomUniqueValidator("emails", Account, normalizer="email")
    assert a.decision("email").field == "email"
