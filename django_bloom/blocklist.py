"""The IP blocklist's API of earlier releases, now ``django_bloom.ipblock.service`` (checks)
and ``django_bloom.ipblock.entries`` (writes): this path keeps working."""

from django_bloom.ipblock import ip as iplib  # noqa: F401
from django_bloom.ipblock.entries import ImportResult, block, import_netset, unblock  # noqa: F401
from django_bloom.ipblock.service import (  # noqa: F401
    ALLOWLISTED,
    BLOCKED,
    EXPIRED,
    FALSE_POSITIVE,
    NOT_LISTED,
    UNKNOWN,
    Decision,
    candidate_networks,
    check_ip,
    ensure_blocklist_filter,
    forget_caches,
    iter_filter_items,
    prefix_lengths,
    rebuild_blocklist,
    warn_throttled,
)
