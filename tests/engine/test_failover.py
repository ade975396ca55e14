"""Failover never turns an acknowledged add into a false "absent".

``WRITE_REPLICAS = n`` sends ``WAIT n WRITE_REPLICAS_TIMEOUT_MS`` with every add
(same round trip): an add that fewer replicas acknowledged raises
``WriteNotReplicated``, and the on-commit sync then marks the filter stale.
The last test runs a real primary, replica and three sentinels, kills the
primary before it replicated, and lets Sentinel promote the replica.
"""

from __future__ import annotations

import time
import uuid

import pytest
import redis
from django.core.exceptions import ImproperlyConfigured, ValidationError
from django.db.models.signals import post_save
from django.test import override_settings

import django_bloom
from django_bloom.conf import get_config
from django_bloom.engine.transport import breaker
from django_bloom.exceptions import FilterUnavailable, WriteNotReplicated
from django_bloom.models import BloomFilter
from django_bloom.unique import sync
from django_bloom.validators import BloomUniqueValidator
from tests.testapp.models import Account

pytestmark = pytest.mark.django_db

BINDINGS = {
    "account-emails": {
        "source": "testapp.Account.email",
        "normalizer": "email_ci",
        "capacity": 10_000,
    }
}


@pytest.fixture
def bound(bloom_prefix):
    """``bound(alias, **config)``: the bound filter "account-emails" on ``alias``."""
    stack = []

    def bind(alias: str, **config):
        override = override_settings(
            DJANGO_BLOOM={
                "KEY_PREFIX": bloom_prefix,
                "BINDINGS": BINDINGS,
                "CACHE_ALIAS": alias,
                **config,
            }
        )
        override.enable()
        stack.append(override)
        sync.connect_bindings()
        sync.ensure_bound_filters()
        return django_bloom.get_filter("account-emails")

    yield bind
    post_save.disconnect(sender=Account, dispatch_uid="django_bloom.unique.sync:account-emails")
    for override in reversed(stack):
        override.disable()


def test_an_add_no_replica_acknowledged_raises_in_one_round_trip(
    redis_server, cache_alias, settings, sent_commands
):
    alias = cache_alias("own", redis_server().url)
    settings.DJANGO_BLOOM = {**settings.DJANGO_BLOOM, "WRITE_REPLICAS": 1}
    f = django_bloom.create_filter("durable", capacity=1000, cache_alias=alias)
    sent_commands.clear()
    start = time.perf_counter()
    with pytest.raises(WriteNotReplicated):
        f.add("x")
    assert time.perf_counter() - start < 0.6  # WAIT's own 100 ms, not a socket timeout
    assert len(sent_commands) == 1 and b"WAIT" in sent_commands[0]
    with pytest.raises(WriteNotReplicated):
        f.add_many([f"item-{i}" for i in range(2000)])  # the batch path (hiredis reads)
    assert f.contains("x")  # the primary has it; only its durability is in doubt
    assert [s["failures"] for s in breaker.states() if s["alias"] == alias] == [0]


def test_replicated_adds_are_acknowledged(redis_server, cache_alias, settings, sent_commands):
    primary = redis_server()
    replica = redis_server("--replicaof", "127.0.0.1", str(primary.port))
    wait_for_link(primary, replica)
    alias = cache_alias("own", primary.url)
    settings.DJANGO_BLOOM = {**settings.DJANGO_BLOOM, "WRITE_REPLICAS": 1}
    f = django_bloom.create_filter("durable", capacity=10_000, cache_alias=alias)
    sent_commands.clear()
    assert f.add("x") is True
    assert len(sent_commands) == 1
    assert f.add_many(["x", "y", *(f"i-{i}" for i in range(2000))])[:2] == [False, True]
    bits = f.layout.segment.keys.bits
    assert replica.client().get(bits) == primary.client().get(bits)


def test_an_unreplicated_on_commit_add_marks_the_filter_stale(
    redis_server, cache_alias, bound, django_capture_on_commit_callbacks
):
    f = bound(cache_alias("own", redis_server().url), WRITE_REPLICAS=1)
    with django_capture_on_commit_callbacks(execute=True):
        Account.objects.create(username="a", email="a@example.org")
    meta = BloomFilter.objects.get(name=f.name)
    assert meta.is_stale and "replica" in meta.rebuild_error
    validator = BloomUniqueValidator(f.name, "testapp.Account", "email")
    with pytest.raises(ValidationError):
        validator("A@example.org")


@pytest.mark.parametrize(
    "changes, named",
    [
        ({"WRITE_REPLICAS": 1, "WRITE_REPLICAS_TIMEOUT_MS": 500}, "WRITE_REPLICAS_TIMEOUT_MS"),
        ({"SOCKET_TIMEOUT": 0}, "SOCKET_TIMEOUT"),
        ({"CONNECT_TIMEOUT": "1"}, "CONNECT_TIMEOUT"),
        ({"BREAKER_FAILURES": 0}, "BREAKER_FAILURES"),
    ],
)
def test_connection_settings_are_checked_when_read(settings, changes, named):
    settings.DJANGO_BLOOM = {**settings.DJANGO_BLOOM, **changes}
    with pytest.raises(ImproperlyConfigured, match=named):
        get_config()  # at start-up (bindings, checks), not on some later add


# -- a real failover ------------------------------------------------------------------
def wait_for(condition, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while True:
        try:
            if condition():
                return
        except (redis.RedisError, FilterUnavailable):
            pass
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.05)


def wait_for_link(primary, replica):
    """Until the replica is synced and the primary counts it for WAIT."""

    def online():
        linked = replica.client().info("replication")["master_link_status"] == "up"
        client = primary.client()  # WAIT counts acks of this connection's last write
        client.set("sync-check", 1)
        return linked and client.wait(1, 2000) == 1  # the first ack after a sync can take ~1 s

    wait_for(online, 10, "the replica to sync")


@pytest.fixture
def sentinel_group(redis_server):
    """A primary, a replica and three sentinels (quorum 2), all on free ports."""
    service = f"bloom-{uuid.uuid4().hex[:8]}"  # django-redis caches pools by URL
    primary = redis_server()
    replica = redis_server("--replicaof", "127.0.0.1", str(primary.port))
    config = (
        f"sentinel monitor {service} 127.0.0.1 {primary.port} 2\n"
        f"sentinel down-after-milliseconds {service} 500\n"
        f"sentinel failover-timeout {service} 3000\n"
    )
    sentinels = [redis_server("--sentinel", config=config) for _ in range(3)]
    wait_for_link(primary, replica)

    def known():
        for s in sentinels:
            client = s.client()
            if len(client.sentinel_slaves(service)) != 1:
                return False
            if len(client.sentinel_sentinels(service)) != 2:
                return False
        return True

    wait_for(known, 10, "the sentinels to know each other and the replica")
    return service, primary, replica, sentinels


def sentinel_alias(settings, service, sentinels) -> str:
    """A django-redis Sentinel alias ("ha") on this group's service and sentinels."""
    settings.CACHES = {
        **settings.CACHES,
        "ha": {
            "BACKEND": "django_redis.cache.RedisCache",
            "LOCATION": f"redis://{service}/0",
            "OPTIONS": {
                "CLIENT_CLASS": "django_redis.client.SentinelClient",
                "CONNECTION_FACTORY": "django_redis.pool.SentinelConnectionFactory",
                "SENTINELS": [("127.0.0.1", s.port) for s in sentinels],
            },
        },
    }
    return "ha"


@pytest.mark.slow
def test_sentinel_failover_never_gives_a_false_absent(
    sentinel_group, settings, bound, django_capture_on_commit_callbacks
):
    service, primary, replica, sentinels = sentinel_group
    f = bound(sentinel_alias(settings, service, sentinels), WRITE_REPLICAS=1)
    control = django_bloom.create_filter("control", capacity=1000, cache_alias="ha")
    assert control.add("replicated")  # acknowledged by the replica, as is the create before it
    with django_capture_on_commit_callbacks(execute=True):
        Account.objects.create(username="acked", email="acked@example.org")
    assert f.contains("acked@example.org")
    assert BloomFilter.objects.get(name=f.name).rebuild_state == ""

    # The replica stops receiving (frozen, its link cut); the primary takes writes.
    replica.pause()
    primary.client().execute_command("CLIENT", "KILL", "TYPE", "replica")
    with django_capture_on_commit_callbacks(execute=True):
        Account.objects.create(username="lost", email="lost@example.org")
    meta = BloomFilter.objects.get(name=f.name)
    assert meta.is_stale  # WAIT saw no replica: the validator uses the DB
    with override_settings(DJANGO_BLOOM={**settings.DJANGO_BLOOM, "WRITE_REPLICAS": 0}):
        assert control.add("unprotected")  # acknowledged by the primary alone

    # The primary dies before replicating; Sentinel promotes the replica.
    primary.kill()
    replica.resume()
    killed = time.monotonic()
    wait_for(
        lambda: sentinels[0].client().sentinel_get_master_addr_by_name(service)[1] == replica.port,
        20,
        "Sentinel to promote the replica",
    )
    start = time.monotonic()
    f = django_bloom.get_filter(f.name, refresh=True)
    wait_for(lambda: f.contains("acked@example.org"), 10, "the engine to follow the failover")
    followed = time.monotonic() - start
    print(
        f"\n[figures] failover: Sentinel promoted the replica {start - killed:.2f} s after "
        f"the kill; the engine answered from it {followed:.2f} s later"
    )
    assert followed < 10
    assert replica.client().info("replication")["role"] == "master"

    # The acknowledged add survived; the unacknowledged one raised and the filter
    # is stale, so the validator asks the database: no false "unique".
    validator = BloomUniqueValidator(f.name, "testapp.Account", "email")
    for taken in ("acked@example.org", "LOST@example.org"):
        with pytest.raises(ValidationError):
            validator(taken)
    validator("new@example.org")
    # Control: the fault really loses unreplicated writes (what WAIT protects from).
    control = django_bloom.get_filter("control", refresh=True)
    assert control.contains("replicated")
    assert control.contains("unprotected") is False
