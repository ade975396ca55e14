"""The django-health-check plugin through django-health-check's own view (tests/
health_urls.py), with a real private Redis stopped and a real key deleted."""

import pytest
from django.test import Client

health_check = pytest.importorskip(
    "health_check", reason="HEALTH CHECK TEST SKIPPED: django-health-check is not installed"
)

import django_bloom  # noqa: E402
from django_bloom.models import BloomFilter  # noqa: E402
from django_bloom.ops import monitoring  # noqa: E402

# transaction=True: django-health-check 3.x runs each plugin in a thread of its own
# (its own database connection), which must see the test's rows.
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.urls("tests.health_urls")]


@pytest.fixture(autouse=True)
def plugin_installed(settings):
    """The plugin app installed as the docs say (3.x registers it in ready())."""
    settings.INSTALLED_APPS = [
        *settings.INSTALLED_APPS, "health_check", "django_bloom.contrib.health_check",
    ]  # fmt: skip
    monitoring.forget_stats()
    yield
    monitoring.forget_stats()


def check():
    """(HTTP status, our check's text) from the health view's JSON."""
    response = Client().get("/ht/", {"format": "json"})
    body = response.json()
    assert len(body) == 1, body  # our check only
    return response.status_code, next(iter(body.values()))


def test_healthy_when_redis_answers_and_every_key_is_there():
    django_bloom.create_filter("emails", capacity=1000).add("a@example.org")
    django_bloom.create_filter("pushed", capacity=100, family=True)
    code, text = check()
    assert code == 200
    assert text in ("working", "OK")  # 3.x says "working", 4.x "OK"


def test_a_deleted_key_is_unhealthy_and_says_rebuild(redis_client):
    f = django_bloom.create_filter(
        "emails", capacity=1000, kind="unique", source="testapp.Account.email"
    )
    django_bloom.create_filter("other", capacity=1000)
    redis_client.delete(f.layout.segment.keys.bits)
    code, text = check()
    assert code == 500
    assert "filter 'emails': its Redis key is missing" in text
    assert "manage.py bloom rebuild emails" in text
    assert "'other'" not in text


def test_redis_stopped_is_unhealthy_and_names_the_alias(redis_server, cache_alias):
    server = redis_server()
    cache_alias("own", server.url)
    django_bloom.create_filter("on-own", capacity=1000, cache_alias="own")
    django_bloom.create_filter("on-shared", capacity=1000)
    assert check()[0] == 200
    server.kill()
    code, text = check()
    assert code == 500
    assert "Redis of cache alias 'own' does not answer" in text
    assert "(on-own)" in text and "on-shared" not in text
    assert "127.0.0.1" not in text  # no host in a public status page


def test_full_and_stale_filters_are_reported():
    django_bloom.create_filter("over", capacity=100).add_many([f"o-{i}" for i in range(250)])
    django_bloom.create_filter("stale", capacity=100)
    BloomFilter.objects.filter(name="stale").update(stale_marks=1)
    code, text = check()
    assert code == 500  # warnings count as errors by default (3.x setting, 4.x always)
    assert "filter 'over' is full" in text and "--capacity N" in text
    assert "filter 'stale' is stale" in text


def test_a_family_with_a_member_over_capacity_is_reported_without_rebuild_advice():
    django_bloom.create_filter("pushed", capacity=100, family=True)
    django_bloom.get_filter("pushed", member=1).add_many([f"a-{i}" for i in range(250)])
    code, text = check()
    assert code == 500
    assert "filter family 'pushed': its fullest sampled member is at" in text
    assert "create a larger family" in text and "rebuild" not in text
