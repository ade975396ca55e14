"""Filters on a cache alias using Django's built-in RedisCache instead of django-redis.

The alias "djredis" (tests/settings.py) points at the shared Redis; keys are
under the test's prefix like every other test's.
"""

import threading

import pytest
import redis
from django.conf import settings
from django.core.exceptions import ValidationError
from django.test import Client, override_settings
from django_redis import get_redis_connection

import django_bloom
from django_bloom import checks
from django_bloom import ipblock as blocklist
from django_bloom.engine.transport import cache_client
from django_bloom.exceptions import BloomError, FilterNotFound
from django_bloom.unique import sync
from django_bloom.validators import BloomUniqueValidator
from tests.testapp.models import Account

pytestmark = pytest.mark.django_db

ALIAS = "djredis"


@pytest.fixture
def on_django_cache(settings):
    """Every filter (and the validator, the middleware) defaults to the alias."""
    settings.DJANGO_BLOOM = {**settings.DJANGO_BLOOM, "CACHE_ALIAS": ALIAS}
    django_bloom.services.forget_filters()


def test_redis_client_is_the_django_backends_client():
    client = cache_client.redis_client(ALIAS)
    assert type(client) is redis.Redis
    django_redis_pool = get_redis_connection("default").connection_pool
    assert client.connection_pool is not django_redis_pool  # Django's own pool
    kwargs, shared = client.connection_pool.connection_kwargs, django_redis_pool.connection_kwargs
    assert [kwargs[k] for k in ("host", "port", "db")] == [
        shared[k] for k in ("host", "port", "db")
    ]
    assert client.ping() is True


@pytest.mark.parametrize("alias", ["default", ALIAS])
def test_one_pool_per_process_whatever_the_thread(alias):
    # Django keeps one RedisCache (and so one pool) per thread or async context:
    # handles made on other threads must still share the engine's connections.
    pools = []
    for _ in range(3):
        thread = threading.Thread(
            target=lambda: pools.append(cache_client.redis_client(alias).connection_pool)
        )
        thread.start()
        thread.join()
    pools.append(cache_client.redis_client(alias).connection_pool)
    assert len({id(pool) for pool in pools}) == 1


def test_redis_client_refuses_a_non_redis_cache():
    with pytest.raises(BloomError, match="'locmem' is a .*LocMemCache, not a Redis cache"):
        cache_client.redis_client("locmem")


def test_filter_lifecycle_on_django_redis_cache(bloom_prefix, redis_client):
    f = django_bloom.create_filter("emails", capacity=1000, error_rate=0.01, cache_alias=ALIAS)
    assert f.meta.cache_alias == ALIAS
    # The engine makes its connections from the Django backend's pool.
    assert f.storage.client.connection_pool.pool is cache_client.redis_client(ALIAS).connection_pool
    # The bits key is on the server the alias names, under the test's prefix.
    assert redis_client.exists(f.identity[0]) == 1

    assert f.add("a@example.org") is True
    assert f.add("a@example.org") is False
    assert f.contains("a@example.org") and not f.contains("nobody@example.org")
    batch = [f"user{i}@example.org" for i in range(500)]
    # A fresh filter at p = 0.01: now and then one item of 500 reads "maybe" already.
    new = f.add_many(batch).count(True)
    assert 495 <= new <= 500
    assert all(f.contains_many(batch))
    assert f.stats().items_added == 1 + new

    # Rebuild (resize) onto the same alias keeps everything given.
    assert f.rebuild(["kept@example.org", *batch[:10]], capacity=5000) == 11
    f = django_bloom.get_filter("emails", refresh=True)
    assert f.contains("kept@example.org") and all(f.contains_many(batch[:10]))
    assert f.stats().capacity == 5000

    f.clear()
    assert not any(f.contains_many(["kept@example.org", *batch[:10]]))
    assert f.stats().bits_set == 0

    key = f.identity[0]
    f.delete()
    assert redis_client.exists(key) == 0
    with pytest.raises(FilterNotFound):
        django_bloom.get_filter("emails", refresh=True)


def test_one_round_trip_per_operation(sent_commands):
    f = django_bloom.create_filter("ids", capacity=1000, cache_alias=ALIAS)
    f.contains("x")  # connect outside the count
    for operation in (
        lambda: f.add("a"),
        lambda: f.contains("a"),
        lambda: f.add_many(["b", "c"]),
        lambda: f.contains_many(["b", "c", "d"]),
    ):
        sent_commands.clear()
        operation()
        assert len(sent_commands) == 1


def test_unique_validator_on_django_redis_cache(on_django_cache, django_assert_num_queries):
    f = django_bloom.create_filter(
        "usernames", capacity=1000, kind="unique", source="testapp.Account.username",
        normalizer="username",
    )  # fmt: skip
    assert f.meta.cache_alias == ALIAS
    Account.objects.create(username="alice", email="alice@example.org")
    sync.add_rows("usernames", ["alice"])
    validator = BloomUniqueValidator("usernames", "testapp.Account", "username")
    django_bloom.get_filter("usernames")
    with django_assert_num_queries(0):
        validator("bob")  # certainly absent: no query
    with pytest.raises(ValidationError) as info:
        validator("ALICE")
    assert info.value.code == "unique"


def test_blocklist_middleware_on_django_redis_cache(on_django_cache, settings):
    settings.MIDDLEWARE = ["django_bloom.middleware.BlocklistMiddleware", *settings.MIDDLEWARE]
    blocklist.block("203.0.113.0/24", reason="test network")
    assert (
        django_bloom.get_filter(
            settings.DJANGO_BLOOM.get("BLOCKLIST_FILTER", "ip-blocklist")
        ).meta.cache_alias
        == ALIAS
    )
    assert Client().get("/", REMOTE_ADDR="203.0.113.7").status_code == 403
    assert Client().get("/", REMOTE_ADDR="198.51.100.20").status_code == 200


def test_check_accepts_djangos_redis_cache(on_django_cache):
    assert checks.check_settings() == []


def test_check_still_rejects_other_backends():
    # The full E002 message is in test_checks.py.
    dummy = {"BACKEND": "django.core.cache.backends.dummy.DummyCache"}
    with override_settings(CACHES={**settings.CACHES, "default": dummy}):
        assert [m.id for m in checks.check_settings()] == ["django_bloom.E002"]
