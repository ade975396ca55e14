"""Settings: the one place ``settings.DJANGO_BLOOM`` is read.

Read at call time (never at import) and cached; the cache is cleared by
Django's ``setting_changed`` signal so ``override_settings`` works in tests.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from typing import Any

from django.conf import settings
from django.core.signals import setting_changed

SETTING_NAME = "DJANGO_BLOOM"

DEFAULTS: dict[str, Any] = {
    # django-redis cache alias used when a filter does not name its own.
    "CACHE_ALIAS": "default",
    # Prefix of every Redis key this app writes.
    "KEY_PREFIX": "bloom",
    # Seconds a process keeps a filter's metadata row before re-reading it.
    "METADATA_TTL": 30.0,
    # BITCOUNT is run over byte ranges of this size so stats never block
    # Redis for long on big filters.
    "STATS_CHUNK_BYTES": 4 * 1024 * 1024,
    # Bytes per SETRANGE when uploading an in-process bitmap.
    "UPLOAD_CHUNK_BYTES": 8 * 1024 * 1024,
    # Filters bound to model fields, kept in sync on save (see django_bloom.unique.sync):
    # {"filter-name": {"source": "app_label.Model.field", "normalizer": "email_ci",
    #                  "capacity": 1_000_000, "error_rate": 0.01}}
    "BINDINGS": {},
    # IP blocklist middleware.
    "BLOCKLIST_FILTER": "ip-blocklist",
    "TRUSTED_PROXIES": [],
    "ALLOWLIST": ["127.0.0.0/8", "::1/128"],
    "FAIL_OPEN": True,
    "BLOCKED_TEMPLATE": "django_bloom/blocked.html",
    "CONFIRM_CACHE_TTL": 60.0,
    # Seconds a process keeps the blocklist's prefix lengths in use (read from the DB).
    "PREFIX_LENGTHS_TTL": 60.0,
    # Size of a blocklist filter created on first block()/import.
    "BLOCKLIST_CAPACITY": 1_000_000,
    "BLOCKLIST_ERROR_RATE": 0.0001,
    # Each process keeps a local copy of BLOCKLIST_FILTER's filter (as if it were in
    # MIRROR_FILTERS): a check costs no Redis round trip.
    "BLOCKLIST_MIRROR": True,
    # Batches of more items are hashed and sent chunk by chunk of this many items, so
    # Redis works while Python hashes (one round trip still); 0: one chunk.
    "BATCH_STREAM_ITEMS": 192,
    # A batch (any iterable, a generator too) is read and sent this many items at a time:
    # one round trip each, so client memory stays bounded whatever the batch's size.
    "BATCH_CHUNK_ITEMS": 25_000,
    # The largest bitmap one Redis string (a filter segment) may hold: Redis's 512 MiB
    # string limit minus the 16-byte trailer. A standard filter bigger than this is
    # created with layout "sharded", split into enough segments (docs/cluster.md).
    "MAX_SEGMENT_BYTES": 512 * 1024 * 1024 - 16,
    # The most bytes one filter's Redis keys may hold (a family: each member's), checked
    # before anything is written: 4 GiB is 3.5 billion items at p=0.01, and what one
    # typo'd capacity may claim of a shared Redis before create refuses.
    "MAX_FILTER_BYTES": 4 * 1024 * 1024 * 1024,
    # Redis Cluster connections for the filter engine: {"name": "redis://host:port"}.
    # A filter whose cache_alias is such a name talks to the cluster through redis-py's
    # RedisCluster (slot routing) instead of a django-redis cache (docs/cluster.md).
    "CLUSTERS": {},
    # Local in-process mirror of read-mostly filters.
    "MIRROR_FILTERS": [],
    "MIRROR_REFRESH_SECONDS": 5.0,
    "MIRROR_MAX_BYTES": 64 * 1024 * 1024,
    # Mirrors learn of other processes' writes from Redis's invalidation messages
    # (CLIENT TRACKING, one listener thread per process and alias); polling stays.
    "MIRROR_TRACKING": True,
    # Redis timeouts of the filter engine, in seconds, whatever the cache's OPTIONS
    # say (redis-py's own default is 5 s, or none at all before 6.0): a Redis that
    # stalls costs one request SOCKET_TIMEOUT, then the circuit breaker answers at once.
    "SOCKET_TIMEOUT": 0.2,
    "CONNECT_TIMEOUT": 0.2,
    # Commands that allocate or copy a whole filter (create, clear, rebuild's
    # upload): Redis needs up to ~0.7 s per 512 MiB key, so they get longer.
    "SLOW_COMMAND_TIMEOUT": 10.0,
    # Circuit breaker, one per cache alias and process: after BREAKER_FAILURES
    # consecutive connection failures (one timeout is enough), calls fail at once
    # with RedisUnreachable; a background probe PINGs every BREAKER_RETRY_SECONDS
    # and closes it when Redis answers.
    "BREAKER_FAILURES": 3,
    "BREAKER_RETRY_SECONDS": 1.0,
    # Failover safety: each add also sends ``WAIT WRITE_REPLICAS TIMEOUT_MS`` in the
    # same round trip; fewer acknowledgements raise WriteNotReplicated (a
    # FilterUnavailable: bound filters are then marked stale). 0 turns it off.
    "WRITE_REPLICAS": 0,
    "WRITE_REPLICAS_TIMEOUT_MS": 100,
}


@cache
def get_config() -> dict[str, Any]:
    user = getattr(settings, SETTING_NAME, {}) or {}
    unknown = set(user) - set(DEFAULTS)
    if unknown:
        from django.core.exceptions import ImproperlyConfigured

        raise ImproperlyConfigured(f"{SETTING_NAME} has unknown keys: {', '.join(sorted(unknown))}")
    config = {**DEFAULTS, **user}
    _check_connection_settings(config)
    if config["BLOCKLIST_MIRROR"] and config["BLOCKLIST_FILTER"] not in config["MIRROR_FILTERS"]:
        config["MIRROR_FILTERS"] = [*config["MIRROR_FILTERS"], config["BLOCKLIST_FILTER"]]
    return config


def _check_connection_settings(config: dict[str, Any]) -> None:
    """Refuse at start-up what would make every Redis call fail later."""
    from django.core.exceptions import ImproperlyConfigured

    def number(value: Any) -> bool:
        return isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0

    seconds = ("SOCKET_TIMEOUT", "CONNECT_TIMEOUT", "SLOW_COMMAND_TIMEOUT", "BREAKER_RETRY_SECONDS")
    for name in seconds:
        if not number(config[name]):
            raise ImproperlyConfigured(f"{SETTING_NAME}['{name}'] must be seconds above 0")
    for name, least in (
        ("BREAKER_FAILURES", 1),
        ("WRITE_REPLICAS", 0),
        ("MAX_FILTER_BYTES", 1),
        ("BATCH_CHUNK_ITEMS", 1),
    ):
        value = config[name]
        if not isinstance(value, int) or isinstance(value, bool) or value < least:
            raise ImproperlyConfigured(f"{SETTING_NAME}['{name}'] must be an integer >= {least}")
    wait_ms = config["WRITE_REPLICAS_TIMEOUT_MS"]
    if config["WRITE_REPLICAS"] and not (
        number(wait_ms) and wait_ms < config["SOCKET_TIMEOUT"] * 1000
    ):
        raise ImproperlyConfigured(
            f"{SETTING_NAME}['WRITE_REPLICAS_TIMEOUT_MS'] must be above 0 and below "
            "SOCKET_TIMEOUT (in ms): a longer WAIT would count as a stalled Redis"
        )


def forget_on_change(forget: Callable[[], None], caches: bool = False) -> Callable[[], None]:
    """Call ``forget`` (a cache's reset) whenever ``DJANGO_BLOOM`` changes (tests'
    ``override_settings``), and ``CACHES`` too with ``caches`` (what holds connections).
    Each module with a cache registers its own."""
    watched = (SETTING_NAME, "CACHES") if caches else (SETTING_NAME,)

    def handler(*, setting: str, **kwargs: Any) -> None:
        if setting in watched:
            forget()

    setting_changed.connect(
        handler, weak=False, dispatch_uid=f"{forget.__module__}.{forget.__name__}"
    )
    return forget


@forget_on_change
def _forget_config() -> None:
    """Settings changed (tests): forget the parsed config. Modules that cache what
    depends on it register their own (services, mirror, the blocklist)."""
    get_config.cache_clear()
