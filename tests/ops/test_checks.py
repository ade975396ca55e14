"""System checks: exact messages under override_settings, real Redis servers.

Policy checks start their own redis-server on a free port (the shared one on
6379 is never reconfigured).
"""

from __future__ import annotations

import os

import pytest
import redis
from django.conf import settings
from django.core.checks import Error, Info, Warning, run_checks
from django.test import override_settings

import django_bloom
from django_bloom import checks, eviction
from django_bloom.models import BloomFilter
from tests.conftest import caches_with

pytestmark = pytest.mark.django_db
DB = ["default"]


def bloom_settings(**extra):
    return {**settings.DJANGO_BLOOM, **extra}


def ours(messages):
    return [m for m in messages if m.id and m.id.startswith("django_bloom.")]


# -- settings checks (always run, no I/O) ---------------------------------------
def test_test_settings_are_clean():
    assert checks.check_settings() == []
    assert ours(run_checks()) == []
    assert ours(run_checks(databases=DB)) == []


def test_missing_cache_alias_e001():
    with override_settings(DJANGO_BLOOM=bloom_settings(CACHE_ALIAS="nope")):
        assert checks.check_settings() == [
            Error(
                "Cache alias 'nope' is not defined in settings.CACHES.",
                hint="Add a django-redis cache with that alias, or point DJANGO_BLOOM"
                "['CACHE_ALIAS'] / the filter's cache_alias at an existing one.",
                obj="settings.DJANGO_BLOOM['CACHE_ALIAS']",
                id="django_bloom.E001",
            )
        ]
        assert [m.id for m in ours(run_checks())] == ["django_bloom.E001"]


def test_non_redis_cache_alias_e002():
    with override_settings(DJANGO_BLOOM=bloom_settings(CACHE_ALIAS="locmem")):
        assert checks.check_settings() == [
            Error(
                "Cache alias 'locmem' uses 'django.core.cache.backends.locmem.LocMemCache', "
                "not a Redis cache backend.",
                hint="Bloom filters live in Redis: use BACKEND "
                "'django_redis.cache.RedisCache' (or Django's "
                "'django.core.cache.backends.redis.RedisCache') for this alias.",
                obj="settings.DJANGO_BLOOM['CACHE_ALIAS']",
                id="django_bloom.E002",
            )
        ]


def test_caches_without_django_redis_e002():
    caches = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}
    with override_settings(CACHES=caches):
        assert [(m.id, m.obj) for m in checks.check_settings()] == [
            ("django_bloom.E002", "settings.DJANGO_BLOOM['CACHE_ALIAS']")
        ]


def test_invalid_trusted_proxies_e003():
    proxies = ["10.0.0.0/8", "2001:db8::/32", "192.0.2.1", "not-a-net", "10.0.0.0/33"]
    with override_settings(DJANGO_BLOOM=bloom_settings(TRUSTED_PROXIES=proxies)):
        errors = checks.check_settings()
    assert [e.id for e in errors] == ["django_bloom.E003", "django_bloom.E003"]
    assert errors[0].msg.startswith("TRUSTED_PROXIES entry 'not-a-net' is not an IP address")
    assert errors[1].msg.startswith("TRUSTED_PROXIES entry '10.0.0.0/33' is not an IP address")
    assert errors[0].obj == "settings.DJANGO_BLOOM['TRUSTED_PROXIES']"


def test_trusted_proxies_must_be_a_list_e003():
    with override_settings(DJANGO_BLOOM=bloom_settings(TRUSTED_PROXIES=10)):
        assert checks.check_settings() == [
            Error(
                "TRUSTED_PROXIES must be a list of addresses or CIDR networks, got int.",
                hint="For example: 'TRUSTED_PROXIES': ['10.0.0.0/8', '2001:db8::/32']",
                obj="settings.DJANGO_BLOOM['TRUSTED_PROXIES']",
                id="django_bloom.E003",
            )
        ]
    # A single string is one entry (as the middleware reads it); a comma list is not.
    with override_settings(DJANGO_BLOOM=bloom_settings(TRUSTED_PROXIES="10.0.0.0/8")):
        assert checks.check_settings() == []
    with override_settings(DJANGO_BLOOM=bloom_settings(TRUSTED_PROXIES="10.0.0.0/8,10.1.0.0/16")):
        assert [e.id for e in checks.check_settings()] == ["django_bloom.E003"]


def test_invalid_allowlist_e004():
    with override_settings(DJANGO_BLOOM=bloom_settings(ALLOWLIST=["127.0.0.0/8", 42, "::1/129"])):
        errors = checks.check_settings()
    assert [e.id for e in errors] == ["django_bloom.E004", "django_bloom.E004"]
    assert "entry 42 " in errors[0].msg and "'::1/129'" in errors[1].msg


def test_unknown_setting_key_e005():
    with override_settings(DJANGO_BLOOM=bloom_settings(CACHE_ALIASS="default")):
        errors = checks.check_settings()
    assert [(e.id, e.obj) for e in errors] == [("django_bloom.E005", "settings.DJANGO_BLOOM")]
    assert "CACHE_ALIASS" in errors[0].msg


# -- database / Redis checks --------------------------------------------------------
def over_capacity_filter():
    f = django_bloom.create_filter("tiny", capacity=100, error_rate=0.01)
    f.add_many([f"item-{i}" for i in range(300)])
    return f


def test_db_checks_only_run_when_databases_are_requested():
    over_capacity_filter()
    assert ours(run_checks()) == []  # plain `manage.py check`: no Redis, no DB
    assert [m.id for m in ours(run_checks(databases=DB))] == ["django_bloom.W003"]
    assert [m.id for m in run_checks(tags=["django_bloom"], databases=DB)] == ["django_bloom.W003"]


def test_over_capacity_w003_with_current_fpr():
    f = over_capacity_filter()
    django_bloom.create_filter("roomy", capacity=10_000, error_rate=0.01).add("x")
    stats = f.stats()
    assert stats.capacity_used > 1
    assert checks.check_filters(databases=DB) == [
        Warning(
            f"Bloom filter 'tiny' holds about {stats.estimated_items:,.0f} items, "
            f"{stats.capacity_used:.0%} of its capacity 100: its current false-positive "
            f"rate is {stats.current_fpr:.3g} (target 0.01).",
            hint="Rebuild it larger: manage.py bloom rebuild tiny --capacity N "
            "(bound filters), or Filter.rebuild(items, capacity=N).",
            obj="BloomFilter 'tiny'",
            id="django_bloom.W003",
        )
    ]
    assert stats.current_fpr > 0.1  # far above target: the warning is worth reading


def test_lost_key_w005(redis_client):
    f = django_bloom.create_filter("lost", capacity=100, error_rate=0.01)
    redis_client.delete(f.layout.segment.keys.bits)
    assert [(m.id, m.obj) for m in checks.check_filters(databases=DB)] == [
        ("django_bloom.W005", "BloomFilter 'lost'")
    ]
    assert "manage.py bloom rebuild lost" in checks.check_filters(databases=DB)[0].hint


def test_filter_alias_problems_e001_e002():
    BloomFilter.objects.create(name="gone", capacity=10, error_rate=0.1, cache_alias="removed")
    BloomFilter.objects.create(name="local", capacity=10, error_rate=0.1, cache_alias="locmem")
    found = [(m.id, m.obj) for m in checks.check_filters(databases=DB)]
    assert found == [
        ("django_bloom.E001", "BloomFilter 'gone'"),
        ("django_bloom.E002", "BloomFilter 'local'"),
    ]
    assert checks.check_redis(databases=DB) == []  # bad aliases are not probed


def test_unreachable_redis_is_a_warning_w002():
    BloomFilter.objects.create(name="down", capacity=10, error_rate=0.1, cache_alias="dead")
    found = checks.check_redis(databases=DB)
    assert [(m.id, m.obj, m.level) for m in found] == [
        ("django_bloom.W002", "dead", Warning("").level)
    ]
    assert found[0].msg.startswith("Redis for cache alias 'dead' is unreachable")
    assert checks.check_filters(databases=DB) == []  # reported once, by check_redis


MIDDLEWARE = [*settings.MIDDLEWARE, "django_bloom.middleware.BlocklistMiddleware"]


@override_settings(MIDDLEWARE=MIDDLEWARE)
def test_blocklist_middleware_without_its_filter_w004():
    assert checks.check_filters(databases=DB) == [
        Warning(
            "django_bloom.middleware.BlocklistMiddleware is installed but its filter "
            "'ip-blocklist' (DJANGO_BLOOM['BLOCKLIST_FILTER']) does not exist: nothing is "
            "blocked.",
            hint="Run: manage.py bloom import-blocklist FILE, or manage.py bloom create "
            "ip-blocklist --kind blocklist --capacity 1000000 --error-rate 0.001",
            obj="settings.MIDDLEWARE",
            id="django_bloom.W004",
        )
    ]
    django_bloom.create_filter("ip-blocklist", capacity=1000, error_rate=0.001, kind="blocklist")
    assert checks.check_filters(databases=DB) == []


# -- maxmemory-policy, on a private redis-server (the private_redis fixture: conftest.py)
def test_evicting_policy_w001(private_redis):
    location = private_redis("--maxmemory-policy", "allkeys-lru")
    with override_settings(
        CACHES=caches_with("evicting", location),
        DJANGO_BLOOM=bloom_settings(CACHE_ALIAS="evicting"),
    ):
        assert checks.check_redis(databases=DB) == [
            Warning(
                "Redis for cache alias 'evicting' has maxmemory-policy 'allkeys-lru': it may "
                "evict Bloom filter keys, and an evicted filter is lost data.",
                hint="Set maxmemory-policy to noeviction (or a volatile-* policy: filter "
                "keys have no TTL), or keep filters on a Redis that never fills up.",
                obj="evicting",
                id="django_bloom.W001",
            )
        ]
        redis.Redis.from_url(location).config_set("maxmemory-policy", "volatile-lru")
        assert checks.check_redis(databases=DB) == []
        redis.Redis.from_url(location).config_set("maxmemory-policy", "noeviction")
        assert checks.check_redis(databases=DB) == []


def test_evicting_policy_on_a_filter_alias_w001(private_redis):
    location = private_redis("--maxmemory-policy", "allkeys-random")
    with override_settings(CACHES=caches_with("other", location)):
        django_bloom.create_filter("elsewhere", capacity=10, error_rate=0.1, cache_alias="other")
        found = checks.check_redis(databases=DB)
        assert [(m.id, m.obj) for m in found] == [("django_bloom.W001", "other")]
        assert "'allkeys-random'" in found[0].msg


def test_config_refused_is_info_i001(private_redis):
    location = private_redis("--rename-command", "CONFIG", "")
    with override_settings(
        CACHES=caches_with("managed", location),
        DJANGO_BLOOM=bloom_settings(CACHE_ALIAS="managed"),
    ):
        found = checks.check_redis(databases=DB)
    assert [(m.id, m.obj, m.level) for m in found] == [
        ("django_bloom.I001", "managed", Info("").level)
    ]


@pytest.mark.parametrize(
    "policy, evicts",
    [
        ("noeviction", False),
        ("volatile-lru", False),
        ("volatile-lfu", False),
        ("volatile-ttl", False),
        ("volatile-random", False),
        ("allkeys-lru", True),
        ("allkeys-lfu", True),
        ("allkeys-random", True),
    ],
)
def test_policy_classification(policy, evicts):
    assert eviction.is_evicting_policy(policy) is evicts


def test_checks_are_registered_by_the_app_alone():
    """A fresh process that imports nothing but Django's setup still runs our checks."""
    import subprocess
    import sys

    code = (
        "import django; django.setup(); from django.core.checks import registry; "
        "print(sorted(f.__module__ for f in registry.registry.get_checks(True)))"
    )
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "tests.settings"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert "django_bloom.checks" in out.stdout, out.stderr
