"""Filter families: many small filters ("members") from one row's template.

A family row (``BloomFilter.family``) owns no bitmap of its own. Each member
(``get_filter("pushed", member=42)``) is one Redis string of the row's geometry
and format, created by its first write (``engine.family_ops``), with an optional
TTL refreshed by every write. Key names::

    <prefix>:{<filter>:m:<member>}:v1:[<generation>:]bits   a member's bitmap + trailer
    <prefix>:{<filter>}:v1:family                           the family's control key

The member is part of the hash tag, so members spread over cluster slots.
The control key (no TTL) is created with the row: a read of a member key that
does not exist answers "absent" only while the control key exists, so a Redis
that lost its data (restart without persistence, FLUSHALL) raises
``FilterKeyMissing`` instead of answering "absent" for every member.

A member is a ``str`` or an ``int`` (``42`` and ``"42"`` name the same member).
In key names it is percent-encoded (only ``A-Z a-z 0-9 _ . - ~`` stay as they
are), so no member can break the hash tag or a SCAN pattern, and two different
members never share a key.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, unquote

from django_bloom.engine import format as fmt
from django_bloom.engine import hashing
from django_bloom.engine.kinds.base import Layout, Measure
from django_bloom.engine.kinds.capabilities import Mirrorable
from django_bloom.engine.kinds.family import commands as family_ops
from django_bloom.engine.segment import Segment, WriteResult
from django_bloom.exceptions import FilterKeyMissing

if TYPE_CHECKING:
    from django_bloom.engine.storage import Storage

MAX_MEMBER_CHARS = 200
MEMBER_MARK = ":m:"


def member_token(member: Any) -> str:
    """The member as it appears in key names; TypeError/ValueError for a bad one."""
    if isinstance(member, bool) or not isinstance(member, (str, int)):
        raise TypeError(
            f"a family member is a str or an int (e.g. user.pk), not {type(member).__name__}; "
            "pass str(value) for other types"
        )
    text = str(member) if isinstance(member, int) else member
    if not text:
        raise ValueError("a family member must not be an empty string")
    if len(text) > MAX_MEMBER_CHARS:
        raise ValueError(
            f"a family member is at most {MAX_MEMBER_CHARS} characters (got {len(text)}): "
            "it becomes part of Redis key names; hash longer identifiers first"
        )
    try:
        return quote(text, safe="")
    except UnicodeEncodeError:
        raise ValueError(f"family member {text!r} is not valid Unicode text") from None


def member_of_token(token: str) -> str:
    """The member a key-name token names (always a str)."""
    return unquote(token)


def control_key(prefix: str, name: str) -> str:
    """The family's control key: exists as long as the family does (no TTL)."""
    return f"{prefix}:{{{name}}}:{fmt.KEY_VERSION}:family"


def members_pattern(prefix: str, name: str) -> str:
    """SCAN pattern matching the bits keys of every member (every generation) of a family."""
    return fmt.bits_pattern(prefix, f"{name}{MEMBER_MARK}*")


def token_of_key(key: str | bytes, prefix: str, name: str) -> str:
    """The member token in a member's bits key name."""
    if isinstance(key, bytes):
        key = key.decode()
    start = len(prefix) + 2 + len(name) + len(MEMBER_MARK)
    return key[start : key.index("}", start)]


def member_segment(family: Segment, token: str) -> Segment:
    """The family's primary segment renamed for one member: the member's key names."""
    return replace(family, name=f"{family.name}{MEMBER_MARK}{token}")


@dataclass(frozen=True)
class MemberLayout(Layout, Mirrorable):
    """One member of a family: the row's layout's positions (a ``FamilyTemplate`` kind),
    on the member's own key, through the family scripts (create on first write, TTL,
    control-key check)."""

    inner: Layout | None = None  # the row's layout, bound to the family's primary segment
    control_key: str = ""
    ttl: int | None = None  # seconds; None: members never expire
    member: str = ""  # the member as given (str form)

    @classmethod
    def of(cls, inner: Layout, token: str, control: str, ttl: int | None) -> MemberLayout:
        return cls(
            member_segment(inner.segment, token),
            inner=inner,
            control_key=control,
            ttl=ttl,
            member=member_of_token(token),
        )

    @property
    def control(self) -> Segment:
        return self.inner.control  # counters live on the family, not per member

    # -- positions: the row's layout's ---------------------------------------------
    def positioner(self) -> Callable[[int, int], list[int]]:
        return self.inner.positioner()

    def position_array(self, digests: bytes) -> Any:
        return self.inner.position_array(digests)

    def prober(self) -> hashing.Prober:
        return self.inner.prober()

    # -- operations: one script, one round trip --------------------------------------
    def contains(self, storage: Storage, flat: Sequence[int]) -> list[bool]:
        return family_ops.member_test(storage, self.segment, self.control_key, flat)

    def add(self, storage: Storage, flat: Sequence[int]) -> WriteResult:
        return family_ops.member_set(storage, self.segment, self.control_key, flat, self.ttl)

    # -- lifecycle of one member ---------------------------------------------------
    def create(self, storage: Storage, replace: bool = True) -> bool:
        return False  # a member key is created by its first write

    def clear(self, storage: Storage) -> None:
        """Empty the member: its key goes (a member never written reads "absent")."""
        family_ops.delete_member(storage, self.segment)

    def delete(self, storage: Storage) -> None:
        family_ops.delete_member(storage, self.segment)

    def measure(self, storage: Storage, chunk_bytes: int) -> Measure:
        try:
            return super().measure(storage, chunk_bytes)
        except FilterKeyMissing:
            if family_ops.member_absent(storage, self.segment, self.control_key):
                return Measure(0, 0.0, 0.0, None)  # never written (or expired): empty, not lost
            raise
