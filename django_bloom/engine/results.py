"""What a write to a filter reports back (storage and layouts share it; imports nothing)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class WriteResult:
    was_new: list[bool]  # per item: whether it was not (maybe) present before
    rebuilding: bool  # the key's REBUILDING flag: journal these items for the running rebuild
