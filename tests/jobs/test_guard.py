"""Cache-penetration guard: 404 with no query for certainly-absent keys, else the normal path."""

import pytest
from django.db import transaction

import django_bloom
from django_bloom.guard import certainly_absent, get_object_or_404_guarded
from django_bloom.models import BloomFilter
from tests.conftest import declared_binding, handshake
from tests.guard_urls import FILTER
from tests.testapp.models import Account

pytestmark = pytest.mark.urls("tests.guard_urls")

STYLES = ["decorated", "mixin", "helper", "async-decorated", "async-mixin"]
BINDINGS = {
    FILTER: {
        "source": "testapp.Account.username",
        "normalizer": "username",
        "capacity": 10_000,
        "error_rate": 0.01,
    }
}


@pytest.fixture
def bound(bloom_prefix):
    with declared_binding(bloom_prefix, FILTER, BINDINGS[FILTER]) as handle:
        yield handle


def add_account(username):
    with transaction.atomic():
        return Account.objects.create(username=username, email=f"{username}@example.org")


def use_dead_redis():
    BloomFilter.objects.filter(name=FILTER).update(cache_alias="dead")
    django_bloom.get_filter(FILTER, refresh=True)


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("style", STYLES)
def test_unknown_key_is_404_without_touching_the_database(
    bound, client, django_assert_num_queries, sent_commands, style
):
    add_account("alice")
    sent_commands.clear()
    with django_assert_num_queries(0):
        assert client.get(f"/{style}/mallory/").status_code == 404
    # One Redis round trip: the filter's answer. (An async view under this WSGI test
    # client runs on an event loop of its own per request, whose first call connects.)
    assert len([c for c in sent_commands if not handshake(c)]) == 1


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("style", STYLES)
def test_known_key_is_served_normally(bound, client, django_assert_num_queries, style):
    add_account("alice")
    with django_assert_num_queries(1):
        response = client.get(f"/{style}/alice/")
    assert response.status_code == 200
    assert response.content == b"alice@example.org"


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("style", STYLES)
def test_false_positive_falls_through_to_the_views_own_404(
    bound, client, django_assert_num_queries, style
):
    bound.add("ghost")  # in the filter, no row: what a false positive looks like
    with django_assert_num_queries(1):  # the view's query ran
        assert client.get(f"/{style}/ghost/").status_code == 404


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("style", STYLES)
def test_redis_down_runs_the_normal_path(bound, client, django_assert_num_queries, style):
    add_account("alice")
    use_dead_redis()
    assert client.get(f"/{style}/alice/").status_code == 200
    with django_assert_num_queries(1):  # the database answers the unknown one
        assert client.get(f"/{style}/mallory/").status_code == 404


@pytest.mark.django_db(transaction=True)
def test_a_filter_that_missed_a_write_runs_the_normal_path(bound, client):
    use_dead_redis()
    add_account("bob")  # the on_commit add fails: the filter is marked stale
    BloomFilter.objects.filter(name=FILTER).update(cache_alias="default")
    assert not django_bloom.get_filter(FILTER, refresh=True).contains("bob")
    for style in STYLES:
        assert client.get(f"/{style}/bob/").status_code == 200


@pytest.mark.django_db(transaction=True)
def test_a_row_the_filter_never_saw_is_served_while_stale(bound, client):
    Account.objects.bulk_create([Account(username="carol", email="c@example.org")])  # no signal
    BloomFilter.objects.filter(name=FILTER).update(stale_marks=1)
    django_bloom.get_filter(FILTER, refresh=True)
    for style in STYLES:
        assert client.get(f"/{style}/carol/").status_code == 200


@pytest.mark.django_db
def test_missing_filter_runs_the_normal_path(client):
    Account.objects.create(username="dave", email="d@example.org")
    assert not certainly_absent(FILTER, "dave")
    for style in STYLES:
        assert client.get(f"/{style}/dave/").status_code == 200
        assert client.get(f"/{style}/nobody/").status_code == 404


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("atomic_requests", [False, True])
def test_a_row_created_by_a_request_is_served_to_the_next_one(
    bound, client, monkeypatch, atomic_requests
):
    """The binding adds in on_commit, which Django runs in the committing thread before
    the creating request returns (with ATOMIC_REQUESTS: when the view's atomic commits)."""
    from django.db import connection

    monkeypatch.setitem(connection.settings_dict, "ATOMIC_REQUESTS", atomic_requests)
    styles = [s for s in STYLES if not s.startswith("async")] if atomic_requests else STYLES
    for style in styles:  # Django refuses ATOMIC_REQUESTS for async views
        name = f"new-{style}"
        assert client.get(f"/{style}/{name}/").status_code == 404
        assert client.post(f"/create/{name}/").status_code == 201
        assert client.get(f"/{style}/{name}/").status_code == 200


@pytest.mark.django_db(transaction=True)
def test_the_filters_normaliser_is_applied(bound, client):
    add_account("Ａｌｉｃｅ")  # stored as typed; the filter holds 'alice'
    assert not certainly_absent(FILTER, "ALICE")  # a maybe: the database decides
    assert certainly_absent(FILTER, "mallory")


def test_helper_needs_the_guarded_lookup_named_when_there_are_several():
    with pytest.raises(TypeError, match="guard_on"):
        get_object_or_404_guarded(Account, FILTER, username="a", email="b")
