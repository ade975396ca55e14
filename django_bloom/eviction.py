"""Whether Redis's ``maxmemory-policy`` may evict filter keys, and the system check
messages that say so (W001, I001, W015; ``check_redis`` in checks.py runs them).

Plain filter keys carry no TTL, so ``noeviction`` and the ``volatile-*`` policies
keep them; kinds whose keys expire (``ExpiringKeys``: rotating windows) and family
members with a TTL are evictable under ``volatile-*`` too.
"""

from __future__ import annotations

from typing import Any

from django.core.checks import Info, Warning

SAFE_POLICIES = {"noeviction"}  # plus every volatile-* policy, see is_evicting_policy


def is_evicting_policy(policy: str) -> bool:
    """True if Redis may evict a plain filter key under memory pressure.

    Plain filter keys never carry a TTL, so ``volatile-*`` policies (which only
    evict keys with a TTL) cannot evict them; ``allkeys-*`` can. Keys that carry
    a TTL (rotating windows, family members) are ``policy_messages``' concern.
    """
    if policy in SAFE_POLICIES:
        return False
    return not policy.startswith("volatile-")


def expiring_filters(filters: list[Any], alias: str) -> list[str]:
    """Names of the filters on ``alias`` whose kind gives keys a TTL (``ExpiringKeys``)."""
    from django_bloom.engine.kinds import layout_class
    from django_bloom.engine.kinds.capabilities import ExpiringKeys

    names = []
    for meta in filters:
        try:
            expiring = issubclass(layout_class(meta.layout), ExpiringKeys)
        except ValueError:  # a layout no longer registered
            continue
        if expiring and meta.cache_alias == alias:
            names.append(meta.name)
    return names


def policy_messages(alias: str, policy: str | None, filters: list[Any]) -> list[Any]:
    """What Redis's ``policy`` (None: CONFIG GET refused) means for the filters on ``alias``."""
    messages: list[Any] = []
    if policy is None:
        messages.append(
            Info(
                f"Could not read maxmemory-policy of Redis for cache alias {alias!r} "
                "(CONFIG GET refused).",
                hint="Make sure the policy is noeviction or volatile-* (noeviction if "
                "you have rotating filters: their slice keys carry a TTL): an evicted "
                "filter cannot answer until it is rebuilt.",
                obj=alias,
                id="django_bloom.I001",
            )
        )
    elif policy.startswith("volatile-") and (expiring := expiring_filters(filters, alias)):
        names = ", ".join(repr(n) for n in expiring)
        messages.append(
            Warning(
                f"Redis for cache alias {alias!r} has maxmemory-policy {policy!r}: it may "
                f"evict the slice keys of rotating filters ({names}) before their window "
                'ends, and an evicted slice answers "absent" for items it held.',
                hint="Set maxmemory-policy to noeviction: rotating filters' slice keys "
                "carry a TTL, so volatile-* policies may evict them.",
                obj=alias,
                id="django_bloom.W001",
            )
        )
    elif is_evicting_policy(policy):
        messages.append(
            Warning(
                f"Redis for cache alias {alias!r} has maxmemory-policy {policy!r}: it may "
                "evict Bloom filter keys, and an evicted filter is lost data.",
                hint="Set maxmemory-policy to noeviction (or a volatile-* policy: filter "
                "keys have no TTL), or keep filters on a Redis that never fills up.",
                obj=alias,
                id="django_bloom.W001",
            )
        )
    if (policy or "").startswith("volatile-") and any(
        f.family and f.member_ttl and f.cache_alias == alias for f in filters
    ):
        messages.append(member_eviction_warning(alias, policy))
    return messages


def member_eviction_warning(alias: str, policy: str) -> Warning:
    """W015: members with a TTL are evictable under a volatile-* policy."""
    return Warning(
        f"Redis for cache alias {alias!r} has maxmemory-policy {policy!r} and holds filter "
        "families whose members have a TTL: under memory pressure Redis may evict a member "
        "key before its TTL, and an evicted member reads as 'absent' (not an error).",
        hint="Set maxmemory-policy to noeviction, or create the families without member_ttl.",
        obj=alias,
        id="django_bloom.W015",
    )
