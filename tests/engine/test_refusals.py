"""Redis that refuses writes (full, read-only replica, loading) makes a filter
*unavailable*: never a plain error, never a raw redis-py exception, never a
false "unique". Each test starts its own redis-server (tests/conftest.py)."""

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import redis
from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models.signals import post_save
from django.test import override_settings

import django_bloom
from django_bloom import counters
from django_bloom.engine.transport.errors import redis_failure
from django_bloom.exceptions import (
    BloomError,
    ClusterDown,
    FilterKeyMissing,
    FilterUnavailable,
    RedisFull,
    RedisLoading,
    RedisReadOnly,
    RedisRefused,
    RedisUnreachable,
)
from django_bloom.models import BloomFilter
from django_bloom.unique import sync
from django_bloom.validators import BloomUniqueValidator
from tests.conftest import caches_with
from tests.testapp.models import Account
from tests.unique.test_sync import BINDINGS

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
        f.storage.incr_counters(f.layout.segment, {"db_skipped": 1})


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
                if replica_client.exists(f.layout.segment.keys.bits):
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
        ("CLUSTERDOWN The cluster is down", ClusterDown),
        ("CLUSTERDOWN Hash slot not served", ClusterDown),
        ("TRYAGAIN Multiple keys request during rehashing of slot", ClusterDown),
        ("WRONGTYPE Operation against a key holding the wrong kind of value", FilterKeyMissing),
        ("ERR unknown command 'BITFIELD_RO'", BloomError),
    ],
)  # fmt: skip
def test_every_reply_parser_maps_a_refusal_the_same_way(reply, expected):
    """redis-py's parser (which strips some codes), a pipeline's annotation, and the
    hot path's own reader all give one exception class.

    LOADING is also seen live, from a server reloading its data:
    ``test_loading_redis_is_unavailable_for_every_call_size``."""
    from redis._parsers.base import BaseParser

    from django_bloom.engine.transport.packing import ReplyError

    parsed = BaseParser.parse_error(reply)
    annotated = type(parsed)(f"Command # 1 (STRLEN k) of pipeline caused error: {parsed}")
    for exc in (parsed, annotated, ReplyError(reply)):
        failure = redis_failure("default", exc)
        assert type(failure) is expected, (exc, failure)
    assert type(redis_failure("default", redis.exceptions.ConnectionError("refused"))) is (
        RedisUnreachable
    )


@contextmanager
def bound_emails_filter(alias: str, prefix: str) -> Iterator[Any]:
    """The "account-emails" unique filter bound to Account.email, on ``alias``."""
    with override_settings(DJANGO_BLOOM={"KEY_PREFIX": prefix, "BINDINGS": BINDINGS}):
        f = django_bloom.create_filter(
            "account-emails",
            capacity=10_000,
            error_rate=0.01,
            kind="unique",
            source="testapp.Account.email",
            normalizer="email_ci",
            cache_alias=alias,
        )
        sync.connect_bindings()
        try:
            yield f
        finally:
            uid = "django_bloom.unique.sync:account-emails"
            post_save.disconnect(sender=Account, dispatch_uid=uid)


def assert_validator_asks_the_database() -> None:
    """The taken dup@example.com is refused (any case), another address accepted."""
    validator = BloomUniqueValidator("account-emails", "testapp.Account", "email")
    for value in ("dup@example.com", "DUP@example.com"):
        with pytest.raises(ValidationError):
            validator(value)
    validator("someone-else@example.com")  # still unique


@pytest.mark.django_db(transaction=True)
def test_row_saved_while_redis_is_full_is_never_called_unique(full_redis, bloom_prefix):
    with bound_emails_filter("full", bloom_prefix):
        fill_up(full_redis)
        with transaction.atomic():
            Account.objects.create(username="dup", email="dup@example.com")
        row = BloomFilter.objects.get(name="account-emails")
        assert row.is_stale and "OOM" in row.rebuild_error
        assert_validator_asks_the_database()


def raw_ping(port: int) -> bytes:
    """PING on a fresh socket: b"+PONG" or the error reply (b"-LOADING ...")."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(b"PING\r\n")
        return sock.recv(256)


def debug_reload(port: int) -> bytes | str:
    try:
        return redis.Redis(port=port, socket_timeout=60).execute_command("DEBUG", "RELOAD")
    except redis.exceptions.RedisError as exc:  # the server was killed mid-load (teardown)
        return str(exc)


@pytest.mark.django_db(transaction=True)
def test_loading_redis_is_unavailable_for_every_call_size(redis_server, cache_alias, bloom_prefix):
    """A live LOADING reply, on every path: a single contains/add (hiredis parses the
    reply), a batch of 3,000 (read straight from the socket), on the connection kept from before the
    load and on connections opened during it.

    DEBUG RELOAD on a server holding 100,000 junk keys with key-load-delay 100 (us per
    key) reloads for tens of seconds, and with a small loading-process-events-interval-
    bytes the server answers other clients -LOADING meanwhile (a server *started* on a
    big dump answered nothing until loaded). CONFIG answers while loading: setting
    key-load-delay back to 0 ends the load as soon as the assertions are done."""
    server = redis_server(
        "--enable-debug-command", "yes", "--loading-process-events-interval-bytes", "1024"
    )
    with bound_emails_filter(cache_alias("loading", server.url), bloom_prefix) as f:
        with transaction.atomic():
            Account.objects.create(username="dup", email="dup@example.com")
        f.add_many(BIG)
        assert f.contains("dup@example.com") and all(f.contains_many(BIG))
        admin = server.client()
        admin.execute_command("DEBUG", "POPULATE", 100_000, "junk")
        admin.config_set("key-load-delay", 100)
        reloaded = []  # DEBUG RELOAD's reply, read by a thread of its own
        reload = threading.Thread(target=lambda: reloaded.append(debug_reload(server.port)))
        reload.start()
        deadline = time.monotonic() + 10
        while not raw_ping(server.port).startswith(b"-LOADING"):
            assert time.monotonic() < deadline, "the server never started loading"
            time.sleep(0.01)
        calls = {
            "contains": lambda: f.contains("dup@example.com"),
            "contains_many": lambda: f.contains_many(BIG),
            "add": lambda: f.add("new@example.com"),
            "add_many": lambda: f.add_many(BIG),
        }
        for name, call in calls.items():
            with pytest.raises(RedisLoading, match="LOADING") as info:
                call()
            assert isinstance(info.value, FilterUnavailable), name
        assert_validator_asks_the_database()
        counters.flush()  # never raises; the counts stay pending
        # Every call above met a loading server, not a loaded one.
        assert raw_ping(server.port).startswith(b"-LOADING")
        admin.config_set("key-load-delay", 0)  # CONFIG answers while loading
        reload.join(timeout=10)
        assert reloaded == [b"OK"], "the reload did not finish"
        # Loaded again: the filter answers, nothing was lost.
        assert f.contains("dup@example.com") and all(f.contains_many(BIG))
        assert f.stats().bits_set > 0
        counters.flush()
        # the validator's calls
        assert f.storage.read_counters(f.layout.segment)["unavailable"] == 3
