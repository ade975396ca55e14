"""A segment: one Redis string of a filter (key names, size, trailer), and what hot-path
operations on segments answer. Storage and plans know segments, never kinds."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any

from django_bloom.engine import format as fmt
from django_bloom.exceptions import FilterKeyMissing, WriteNotReplicated


@dataclass(frozen=True)
class Segment:
    """One Redis string of a filter: what storage needs to run commands on it."""

    name: str
    alias: str
    prefix: str
    num_bits: int
    num_hashes: int
    fingerprint: int
    generation: str = ""  # part of the bits key name; "" for rows made before generations

    @property
    def num_bytes(self) -> int:
        return (self.num_bits + 7) // 8

    @property
    def trailer_offset(self) -> int:
        return self.num_bytes

    @property
    def key_length(self) -> int:
        return self.num_bytes + fmt.TRAILER_BYTES

    @cached_property
    def keys(self) -> fmt.Keys:
        return fmt.filter_keys(self.prefix, self.name, self.generation)

    @property
    def bits_pattern(self) -> str:
        return fmt.bits_pattern(self.prefix, self.name)

    def trailer(self, flags: int = 0, counter: int = 0) -> bytes:
        return fmt.trailer(self.fingerprint, flags, counter)

    def fresh_trailer(self) -> bytes:
        """The trailer of a key made (or emptied) now: zero counter, a new write stamp."""
        return fmt.trailer(self.fingerprint, stamp=fmt.new_stamp())


@dataclass
class WriteResult:
    was_new: list[bool]  # per item: whether it was not (maybe) present before
    rebuilding: bool  # the key's REBUILDING flag: journal these items for the running rebuild
    unreplicated: WriteNotReplicated | None = None  # applied, short of replicas (WAIT)

    def reported(self) -> list[bool]:
        """``was_new``, or the WAIT shortfall, raised once the handle has done what the
        replies asked (its mirror, its journal): never before a refusal."""
        if self.unreplicated is not None:
            raise self.unreplicated
        return self.was_new


def key_missing(segment: Any) -> FilterKeyMissing:
    """The error for a segment whose key is gone or is not this filter's."""
    return FilterKeyMissing(
        f"Bloom filter {segment.name!r}: its Redis key {segment.keys.bits!r} is "
        "missing or does not match this filter (Redis restarted without "
        "persistence, flushed, evicted, or resized). It cannot answer until "
        "it is rebuilt."
    )
