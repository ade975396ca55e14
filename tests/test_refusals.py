"""Redis that refuses writes (full, read-only replica, loading) makes a filter
*unavailable*: never a plain error, never a raw redis-py exception, never a
false "unique". Each test starts its own redis-server (tests/conftest.py)."""

import time

import pytest
import redis
from django.core.exceptions import ValidationError
from django.db import transaction
from django.test import override_settings

import django_bloom
from django_bloom import counters, sync
from django_bloom.engine.storage import redis_failure
from django_bloom.exceptions import (
    BloomError,
    FilterKeyMissing,
    RedisFull,
    RedisLoading,
    RedisReadOnly,
    RedisRefused,
    RedisUnreachable,
)
from django_bloom.models import BloomFilter
from django_bloom.validators import BloomUniqueValidator
from tests.conftest import caches_with
from tests.test_sync import BINDINGS
from tests.testapp.models import Account

pytestmark = pytest.mark.django_db
DB = ["default"]
BIG = [f"batch-{i}" for i in range(3000)]  # read straight from the socket (packing.ReplyReader)


def fill_up(location: str) -> None:
    """Write junk until the server refuses writes (noeviction), then lower maxmemory
    below what it holds, so it stays full whatever a connection frees."""
    client = redis.Redis.from_url(location)
    for i in range(10_000):
        try:
            client.set(f"junk:{i}", b"x" * 50_000)
        except redis.exceptions.OutOfMemoryError:
            break
    else:
        pytest.fail("the server never filled up")
    client.config_set("maxmemory", client.info("memory")["used_memory"] - 500_000)


@pytest.fixture
def full_redis(private_redis, settings, bloom_prefix):
    location = private_redis("--maxmemory", "4mb", "--maxmemory-policy", "noeviction")
    with override_settings(CACHES=caches_with("full", location)):
        yield location


def test_full_redis_refuses_writes_as_unavailable(full_redis):
    f = django_bloom.create_filter("f", capacity=1000, error_rate=0.01, cache_alias="full")
    f.add_many(["kept", *BIG])
    fill_up(full_redis)
    for write in (lambda: f.add("new"), lambda: f.add_many(BIG + ["new"]), f.clear):
        with pytest.raises(RedisFull) as info:
            write()
        assert "OOM" in str(info.value)
    with pytest.raises(RedisFull):
        f.rebuild(["kept"])
    # Reads still work on a full server, and nothing was lost.
    assert f.contains("kept") and all(f.contains_many(BIG))
    assert f.stats().bits_set > 0
    # Bookkeeping never raises into a request.
    counters.record(f, "db_skipped")
    counters.flush()
    with pytest.raises(RedisFull):
        f.storage.incr_counters(f.layout, {"db_skipped": 1})


def test_read_only_replica_refuses_writes_as_unavailable(private_redis, bloom_prefix):
    primary = private_redis()
    replica = private_redis()
    port = redis.Redis.from_url(primary).connection_pool.connection_kwargs["port"]
    with override_settings(CACHES={**caches_with("primary", primary), "replica": {
        "BACKEND": "django_redis.cache.RedisCache", "LOCATION": replica}}):  # fmt: skip
        f = django_bloom.create_filter("f", capacity=1000, error_rate=0.01, cache_alias="primary")
        f.add("kept")
        replica_client = redis.Redis.from_url(replica)
        replica_client.execute_command("REPLICAOF", "127.0.0.1", port)
        for _ in range(200):
            try:
                if replica_client.exists(f.layout.keys.bits):
                    break
            except redis.exceptions.BusyLoadingError:
                pass
            time.sleep(0.05)
        else:
            pytest.fail("the replica never synced")
        BloomFilter.objects.filter(name="f").update(cache_alias="replica")
        r = django_bloom.get_filter("f", refresh=True)
        assert r.contains("kept")  # a replica answers reads
        for write in (lambda: r.add("new"), lambda: r.add_many(BIG), r.clear):
            with pytest.raises(RedisReadOnly) as info:
                write()
            assert "READONLY" in str(info.value)
        with pytest.raises(RedisReadOnly):
            r.rebuild(["kept"])
        counters.record(r, "db_confirmed")
        counters.flush()  # never raises


@pytest.mark.parametrize(
    "reply, expected",
    [
        ("OOM command not allowed when used memory > 'maxmemory'.", RedisFull),
        ("READONLY You can't write against a read only replica.", RedisReadOnly),
        ("LOADING Redis is loading the dataset in memory", RedisLoading),
        ("MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'.",
         RedisRefused),
        ("NOREPLICAS Not enough good replicas to write.", RedisRefused),
        ("BUSY Redis is busy running a script.", RedisRefused),
        ("WRONGTYPE Operation against a key holding the wrong kind of value", FilterKeyMissing),
        ("ERR unknown command 'BITFIELD_RO'", BloomError),
    ],
)  # fmt: skip
def test_every_reply_parser_maps_a_refusal_the_same_way(reply, expected):
    """redis-py's parser (which strips some codes), a pipeline's annotation, and the
    hot path's own reader all give one exception class.

    LOADING is tested here only, on Redis's own reply text: a redis-server 7.0
    started on a large dump (key-load-delay, small loading-process-events-interval-
    bytes) did not answer any connection before its load had finished."""
    from redis._parsers.base import BaseParser

    from django_bloom.engine.packing import ReplyError

    parsed = BaseParser.parse_error(reply)
    annotated = type(parsed)(f"Command # 1 (STRLEN k) of pipeline caused error: {parsed}")
    for exc in (parsed, annotated, ReplyError(reply)):
        failure = redis_failure("default", exc)
        assert type(failure) is expected, (exc, failure)
    assert type(redis_failure("default", redis.exceptions.ConnectionError("refused"))) is (
        RedisUnreachable
    )


@pytest.mark.django_db(transaction=True)
def test_row_saved_while_redis_is_full_is_never_called_unique(full_redis, bloom_prefix):
    with override_settings(DJANGO_BLOOM={"KEY_PREFIX": bloom_prefix, "BINDINGS": BINDINGS}):
        django_bloom.create_filter(
            "account-emails",
            capacity=10_000,
            error_rate=0.01,
            kind="unique",
            source="testapp.Account.email",
            normalizer="email_ci",
            cache_alias="full",
        )
        sync.connect_bindings()
        try:
            fill_up(full_redis)
            with transaction.atomic():
                Account.objects.create(username="dup", email="dup@example.com")
            row = BloomFilter.objects.get(name="account-emails")
            assert row.is_stale and "OOM" in row.rebuild_error
            validator = BloomUniqueValidator("account-emails", "testapp.Account", "email")
            for value in ("dup@example.com", "DUP@example.com"):
                with pytest.raises(ValidationError):
                    validator(value)
            validator("someone-else@example.com")  # still unique
        finally:
            from django.db.models.signals import post_save

            post_save.disconnect(sender=Account, dispatch_uid="django_bloom.sync:account-emails")
