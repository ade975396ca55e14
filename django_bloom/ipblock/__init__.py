"""The IP blocklist feature: address parsing (``ip``), the netset parser (``netset``), checks
(``service``; what they read from the database, cached per process: ``reads``), writes
(``entries``), hits and cooldowns (``hits``), signals (``signals``), feeds (``feeds``), its
admin. The names below are its API::

    from django_bloom import ipblock
    ipblock.block("203.0.113.0/24", reason="abuse")
    ipblock.check_ip("203.0.113.9").blocked

The middleware that uses it is ``django_bloom.middleware.BlocklistMiddleware``.
"""

from __future__ import annotations

from typing import Any

_API = {
    "entries": ("block", "unblock", "import_netset", "ImportResult", "allow", "disallow"),
    "feeds": ("import_feed", "FeedError", "FeedResult"),
    "reads": ("forget_caches", "warn_throttled"),
    "signals": ("request_blocked", "entry_blocked", "entry_unblocked"),
    "service": (
        "ALLOWLISTED", "BLOCKED", "EXPIRED", "FALSE_POSITIVE", "NOT_LISTED", "UNKNOWN",
        "Decision", "candidate_networks", "check_ip", "ensure_blocklist_filter",
        "iter_filter_items", "prefix_lengths", "rebuild_blocklist",
    ),
}
_HOME = {name: module for module, names in _API.items() for name in names}


def __getattr__(name: str) -> Any:
    # Lazy: the service needs Django's app registry; ``ipblock.ip`` and ``ipblock.netset``
    # stay importable without it.
    from importlib import import_module

    if name in _HOME:
        return getattr(import_module(f"django_bloom.ipblock.{_HOME[name]}"), name)
    if name in ("ip", "netset", "service", "entries", "reads", "hits", "signals", "feeds"):
        return import_module(f"django_bloom.ipblock.{name}")
    raise AttributeError(f"module 'django_bloom.ipblock' has no attribute {name!r}")


__all__ = sorted(_HOME)
