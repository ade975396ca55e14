"""What hot-path operations answer, shared by the storage layer and plans (no I/O)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django_bloom.exceptions import FilterKeyMissing


@dataclass
class WriteResult:
    was_new: list[bool]  # per item: whether it was not (maybe) present before
    rebuilding: bool  # the key's REBUILDING flag: journal these items for the running rebuild


def key_missing(layout: Any) -> FilterKeyMissing:
    """The error for a segment whose key is gone or is not this filter's."""
    return FilterKeyMissing(
        f"Bloom filter {layout.name!r}: its Redis key {layout.keys.bits!r} is "
        "missing or does not match this filter (Redis restarted without "
        "persistence, flushed, evicted, or resized). It cannot answer until "
        "it is rebuilt."
    )
