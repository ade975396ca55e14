"""System checks for django-bloom; ids are stable and listed in docs/checks.md.

Two groups, so a plain ``manage.py check`` (and every command's implicit check)
stays fast and never touches the network:

* ``check_settings`` reads settings only and always runs.
* ``check_redis`` and ``check_filters`` talk to Redis and the database. Like
  Django's own database checks they run only when databases are requested:
  ``manage.py check --database default`` and ``manage.py migrate``. They skip
  silently when the tables do not exist yet (first ``migrate``), and an
  unreachable Redis is a warning, never an error: a deploy must not fail
  because Redis blipped. What Redis's eviction policy means for the filters:
  ``eviction.py``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from django.conf import settings
from django.core.checks import Error, Info, Tags, Warning, register
from django.core.exceptions import ImproperlyConfigured
from django.db import DatabaseError
from django.utils.module_loading import import_string

from django_bloom.eviction import policy_messages

TAG = "django_bloom"
MIDDLEWARE_PATH = "django_bloom.middleware.BlocklistMiddleware"


def _ours(app_configs: Iterable[Any] | None) -> bool:
    return app_configs is None or any(ac.name == "django_bloom" for ac in app_configs)


def _config() -> tuple[dict[str, Any] | None, list[Error]]:
    from django_bloom.conf import get_config

    try:
        return get_config(), []
    except ImproperlyConfigured as exc:
        return None, [
            Error(
                str(exc),
                hint="See the settings table in the README for the keys DJANGO_BLOOM accepts.",
                obj="settings.DJANGO_BLOOM",
                id="django_bloom.E005",
            )
        ]


def alias_errors(alias: str, obj: str) -> list[Error]:
    """E001 if ``alias`` is not in CACHES, E002 if it is not a Redis cache (cache_client.py)."""
    caches = getattr(settings, "CACHES", {})
    config, _errors = _config()
    if config and alias in config["CLUSTERS"]:  # a Redis Cluster of the engine's (cluster.py)
        return []
    if alias not in caches:
        return [
            Error(
                f"Cache alias {alias!r} is not defined in settings.CACHES.",
                hint="Add a django-redis cache with that alias, or point DJANGO_BLOOM"
                "['CACHE_ALIAS'] / the filter's cache_alias at an existing one.",
                obj=obj,
                id="django_bloom.E001",
            )
        ]
    from django_bloom.engine.transport.cache_client import backend_classes

    backend = caches[alias].get("BACKEND", "")
    try:
        is_redis = issubclass(import_string(backend), backend_classes())
    except (ImportError, TypeError):
        is_redis = False
    if not is_redis:
        return [
            Error(
                f"Cache alias {alias!r} uses {backend!r}, not a Redis cache backend.",
                hint="Bloom filters live in Redis: use BACKEND "
                "'django_redis.cache.RedisCache' (or Django's "
                "'django.core.cache.backends.redis.RedisCache') for this alias.",
                obj=obj,
                id="django_bloom.E002",
            )
        ]
    return []


def _parse_network(value: Any) -> None:
    """Raise ValueError unless ``value`` is what the middleware's parser accepts."""
    from django_bloom.ipblock.ip import parse_network

    if not isinstance(value, str):
        raise ValueError("not a string")
    parse_network(value)


def network_errors(values: Any, key: str, check_id: str) -> list[Error]:
    """Every entry must be an address or CIDR network (as ``django_bloom.ipblock.ip`` parses it).

    A single string is accepted as one entry, as the middleware does.
    """
    obj = f"settings.DJANGO_BLOOM['{key}']"
    if isinstance(values, str):
        values = [values]
    if not isinstance(values, (list, tuple, set, frozenset)):
        return [
            Error(
                f"{key} must be a list of addresses or CIDR networks, got {type(values).__name__}.",
                hint=f"For example: {key!r}: ['10.0.0.0/8', '2001:db8::/32']",
                obj=obj,
                id=check_id,
            )
        ]
    errors = []
    for value in values:
        try:
            _parse_network(value)
        except ValueError as exc:
            errors.append(
                Error(
                    f"{key} entry {value!r} is not an IP address or CIDR network: {exc}.",
                    hint="Use forms like '203.0.113.7', '10.0.0.0/8' or '2001:db8::/32'.",
                    obj=obj,
                    id=check_id,
                )
            )
    return errors


@register(TAG)
def check_settings(app_configs=None, **kwargs: Any) -> list[Error]:
    """E001/E002 for the default alias, E003 proxies, E004 allowlist, E005 unknown keys."""
    if not _ours(app_configs):
        return []
    config, errors = _config()
    if config is None:
        return errors
    errors += alias_errors(config["CACHE_ALIAS"], "settings.DJANGO_BLOOM['CACHE_ALIAS']")
    errors += network_errors(config["TRUSTED_PROXIES"], "TRUSTED_PROXIES", "django_bloom.E003")
    errors += network_errors(config["ALLOWLIST"], "ALLOWLIST", "django_bloom.E004")
    return errors


def _filters() -> list[Any] | None:
    """All filter rows, or None when the table does not exist yet (before migrate)."""
    from django_bloom.models import BloomFilter

    try:
        return list(BloomFilter.objects.order_by("name"))
    except DatabaseError:
        return None


def _usable_aliases(config: dict[str, Any], filters: list[Any]) -> list[str]:
    """Aliases in use that are django-redis caches (others are reported by E001/E002)."""
    wanted = [config["CACHE_ALIAS"], *(f.cache_alias for f in filters)]
    seen: list[str] = []
    for alias in wanted:
        if alias not in seen and not alias_errors(alias, alias):
            seen.append(alias)
    return seen


def _unreachable(alias: str, exc: Exception) -> Warning:
    return Warning(
        f"Redis for cache alias {alias!r} is unreachable: {exc}",
        hint="Filters on this alias cannot answer (callers fall back to the database, the "
        "blocklist middleware follows FAIL_OPEN). Check the cache LOCATION and that Redis runs.",
        obj=alias,
        id="django_bloom.W002",
    )


def database_check(check: Callable[[dict[str, Any]], list[Any]]) -> Callable[..., list[Any]]:
    """Register ``check(config)`` as a check that talks to Redis and the database: it runs
    only when databases are requested (``check --database``, ``migrate``) and says nothing
    while the settings are broken (``check_settings`` reports E005)."""

    def run(app_configs=None, databases=None, **kwargs: Any) -> list[Any]:
        if not databases or not _ours(app_configs):
            return []
        config, _ = _config()
        return [] if config is None else check(config)

    # Named as the check (not functools.wraps: Django reads run's own signature).
    run.__name__, run.__qualname__, run.__doc__ = check.__name__, check.__qualname__, check.__doc__
    return register(TAG, Tags.database)(run)


@database_check
def check_redis(config: dict[str, Any]) -> list[Any]:
    """W001 evicting maxmemory-policy, W002 Redis unreachable, I001 policy unreadable."""
    from django_bloom.engine.storage import Storage
    from django_bloom.exceptions import RedisRefused, RedisUnreachable

    messages: list[Any] = []
    filters = _filters() or []
    for alias in _usable_aliases(config, filters):
        try:
            policy = Storage(alias).maxmemory_policy()
        except (RedisUnreachable, RedisRefused) as exc:  # e.g. still loading its data
            messages.append(_unreachable(alias, exc))
            continue
        messages += policy_messages(alias, policy, filters)
        if alias not in config["CLUSTERS"]:
            messages += native_messages(alias, filters)
    return messages


NATIVE_HINT_CAPACITY = 100_000  # filters this big are filled in batches (rebuilds, imports)


def native_messages(alias: str, filters: list[Any]) -> list[Any]:
    """E006: filters of a kind the server cannot hold (``ServerChecked``: layout 'native'
    without RedisBloom). I002: the server has RedisBloom and holds plain filters
    (``FamilyTemplate`` kinds: k bits in one bitmap, what a RedisBloom key holds) big
    enough for their batches to matter. Asked of the kinds, never matched on their names."""
    from django_bloom.engine.kinds import layout_class
    from django_bloom.engine.kinds.capabilities import FamilyTemplate, ServerChecked
    from django_bloom.engine.kinds.native.layout import module_available
    from django_bloom.engine.storage import Storage
    from django_bloom.exceptions import FilterUnavailable

    held: dict[type, list[str]] = {}  # ServerChecked kind -> its filters here
    big = []
    for f in filters:
        if f.cache_alias != alias or f.family:
            continue
        kind = layout_class(f.layout)
        if issubclass(kind, ServerChecked):
            held.setdefault(kind, []).append(f.name)
        elif issubclass(kind, FamilyTemplate) and f.capacity >= NATIVE_HINT_CAPACITY:
            big.append(f.name)
    if not held and not big:
        return []  # nothing to say: no round trip
    storage, messages = Storage(alias), []
    try:
        for kind, names in held.items():
            try:
                kind.check_server(storage)
            except ValueError as exc:
                messages.append(
                    Error(
                        f"Redis for cache alias {alias!r} cannot hold the filters of layout "
                        f"{kind.layout_name!r} there ({_names(names)}): they cannot answer. "
                        f"{exc}",
                        hint="Make the server offer what the layout needs (RedisBloom: built "
                        "into Redis 8; Redis Stack; --loadmodule redisbloom.so), or create them "
                        "again with another layout and rebuild them.",
                        obj=alias,
                        id="django_bloom.E006",
                    )
                )
        if big and module_available(storage):
            messages.append(
                Info(
                    f"Redis for cache alias {alias!r} has RedisBloom: big filters there "
                    f"({_names(big)}) could use layout 'native', whose batches (add_many, "
                    "contains_many, rebuilds) run several times faster.",
                    hint="See docs/native.md (which kind to pick when): create_filter(..., "
                    "layout='native'), then rebuild it from its source.",
                    obj=alias,
                    id="django_bloom.I002",
                )
            )
    except FilterUnavailable:
        return []  # unreachable or refusing: W002 says so
    return messages


def _names(names: list[str]) -> str:
    return ", ".join(map(repr, names[:5])) + (" ..." if len(names) > 5 else "")


@database_check
def check_filters(config: dict[str, Any]) -> list[Any]:
    """E001/E002 per filter alias, W003 over capacity, W004 middleware filter missing,
    W005 filter key missing in Redis."""
    from django_bloom.engine.kinds.native.commands import RedisBloomMissing
    from django_bloom.exceptions import FilterKeyMissing, FilterUnavailable
    from django_bloom.ops import monitoring
    from django_bloom.services import Filter

    filters = _filters()
    if filters is None:
        return []
    messages: list[Any] = []
    if MIDDLEWARE_PATH in getattr(settings, "MIDDLEWARE", []):
        name = config["BLOCKLIST_FILTER"]
        if not any(f.name == name for f in filters):
            messages.append(
                Warning(
                    f"{MIDDLEWARE_PATH} is installed but its filter {name!r} "
                    "(DJANGO_BLOOM['BLOCKLIST_FILTER']) does not exist: nothing is blocked.",
                    hint=f"Run: manage.py bloom import-blocklist FILE, or manage.py bloom "
                    f"create {name} --kind blocklist --capacity 1000000 --error-rate 0.001",
                    obj="settings.MIDDLEWARE",
                    id="django_bloom.W004",
                )
            )
    dead: set[str] = set()
    for meta in filters:
        alias_problems = alias_errors(meta.cache_alias, f"BloomFilter {meta.name!r}")
        if alias_problems:
            messages += alias_problems
            continue
        if meta.cache_alias in dead:
            continue
        if meta.family:
            try:
                messages += family_messages(meta)
            except FilterUnavailable:
                dead.add(meta.cache_alias)
            continue
        try:
            stats = Filter(meta).stats()  # checks the trailer's fingerprint, not only the size
        except FilterKeyMissing:
            messages.append(
                Warning(
                    f"Bloom filter {meta.name!r} has no valid key in Redis: it cannot answer "
                    "(Redis restarted without persistence, was flushed, or evicted it).",
                    hint=f"Run: manage.py bloom rebuild {meta.name} (or import-blocklist for "
                    "a blocklist).",
                    obj=f"BloomFilter {meta.name!r}",
                    id="django_bloom.W005",
                )
            )
            continue
        except RedisBloomMissing:  # this row's layout only (E006): the alias answers
            continue
        except FilterUnavailable:  # unreachable or refusing: reported per alias by check_redis
            dead.add(meta.cache_alias)
            continue
        if monitoring.health(stats) == monitoring.OVER:
            messages.append(
                Warning(
                    f"Bloom filter {meta.name!r} holds about {stats.estimated_items:,.0f} items, "
                    f"{stats.capacity_used:.0%} of its capacity {meta.capacity:,}: its current "
                    f"false-positive rate is {stats.current_fpr:.3g} (target {meta.error_rate:g}).",
                    hint=f"Rebuild it larger: manage.py bloom rebuild {meta.name} --capacity N "
                    "(bound filters), or Filter.rebuild(items, capacity=N).",
                    obj=f"BloomFilter {meta.name!r}",
                    id="django_bloom.W003",
                )
            )
    return messages


def family_messages(meta: Any) -> list[Any]:
    """W014: a filter family's control key is missing (its members cannot answer)."""
    from django_bloom.services import Family

    family = Family(meta)
    if family.stats_control_present():
        return []
    return [
        Warning(
            f"Filter family {meta.name!r} has no control key in Redis: every member read "
            "raises instead of answering (Redis restarted without persistence, was flushed, "
            "or evicted it).",
            hint=f"Delete and recreate the family (Family.delete(), then create_filter("
            f"{meta.name!r}, ..., family=True)) and refill its members.",
            obj=f"BloomFilter {meta.name!r}",
            id="django_bloom.W014",
        )
    ]


@database_check
def check_bound_keys(config: dict[str, Any]) -> list[Any]:
    """W010: a declared binding's keys are not complete (the validator's exact lookup)."""
    from django_bloom.unique import boundkeys, sync

    try:
        bindings = sync.declared_bindings()
        incomplete = boundkeys.incomplete(bindings)
    except (ValueError, KeyError, TypeError):
        return []  # a malformed BINDINGS entry fails at start-up with its own message
    except DatabaseError:
        return []  # tables not migrated yet
    return [
        Warning(
            f"Binding {binding.filter_name!r}: {why}. Until its keys are backfilled the unique "
            "validator confirms with a case-insensitive query, which misses rows that match "
            "only after normalising (e.g. 'Straße' vs 'strasse').",
            hint=f"Run: manage.py bloom rebuild {binding.filter_name}",
            obj=f"BINDINGS[{binding.filter_name!r}]",
            id="django_bloom.W010",
        )
        for binding, why in incomplete
    ]
