"""A handle applies its row's normaliser (``BloomFilter.normalizer``) to every text item,
as a binding's writes, the validator and ``bloom check`` do: ``get_filter("emails")
.contains("Carol@Example.com")`` answers as the validator would.

``handle.without_normalizer`` is the same handle taking items as given, for callers that
have normalised them already (the validator, a binding's writes, its rebuild, the
blocklist, ``bloom measure``'s probes). Normalise exactly once: ``username`` (NFKC, then
casefold) is not idempotent on every input ('ß' + U+0301 -> 'ss' + U+0301 -> 'sś'), so
a second pass could change what is hashed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

from django_bloom.unique.normalizers import get_normalizer, identity

Normalize = Callable[[str], str]


def row_normalizer(meta: Any) -> Normalize | None:
    """The row's normaliser, or None (none, or the identity). A name that does not resolve
    fails each operation with a ValueError naming the filter, never ``get_filter``."""
    if not meta.normalizer:
        return None
    try:
        found = get_normalizer(meta.normalizer)
    except ValueError as exc:
        message = f"filter {meta.name!r}: {exc}"

        def unusable(value: str) -> str:
            raise ValueError(message)

        return unusable
    return None if found is identity else found


class Normalizing:
    """Mixed into ``Filter``: needs ``_normalize`` (set by ``_bind``) and ``_raw``."""

    _normalize: Normalize | None

    @property
    def without_normalizer(self) -> WithoutNormalizer:
        """This handle with items taken as given: for items normalised already."""
        return self._raw

    def _one(self, item: Any) -> Any:
        normalize = self._normalize
        if normalize is None or not isinstance(item, str):
            return item  # bytes, ints and encoder inputs are not text: never normalised
        return normalize(item)

    def _many(self, items: Iterable[Any]) -> Sequence[Any]:
        """A list or tuple of the items, each normalised (all before anything is sent)."""
        normalize = self._normalize
        if normalize is None:
            return items if isinstance(items, (list, tuple)) else list(items)
        return [normalize(i) if isinstance(i, str) else i for i in items]

    def _stream(self, items: Iterable[Any]) -> Iterable[Any]:
        """Items normalised one by one as they are read (a rebuild's stream)."""
        normalize = self._normalize
        if normalize is None:
            return items
        return (normalize(i) if isinstance(i, str) else i for i in items)


def _seq(items: Iterable[Any]) -> Sequence[Any]:
    return items if isinstance(items, (list, tuple)) else list(items)


class WithoutNormalizer:
    """``handle.without_normalizer``: the handle's item operations with items taken as
    given (already normalised); every other attribute is the handle's own."""

    __slots__ = ("_handle",)

    def __init__(self, handle: Any):
        self._handle = handle

    def __getattr__(self, name: str) -> Any:
        return getattr(self._handle, name)

    def __repr__(self) -> str:
        return f"{self._handle!r}.without_normalizer"

    @property
    def without_normalizer(self) -> WithoutNormalizer:
        return self

    def validate_items(self, items: Iterable[Any]) -> None:
        h = self._handle
        h.hasher.item_digests(items, h.encoder)

    def contains(self, item: Any) -> bool:
        h = self._handle
        return h._retrying(h._contains, item)

    __contains__ = contains

    def contains_many(self, items: Iterable[Any]) -> list[bool]:
        h = self._handle
        return h._retrying(h._contains_many, _seq(items))

    def add(self, item: Any) -> bool:
        h = self._handle
        return h._retrying(h._add, item)

    def add_many(self, items: Iterable[Any]) -> list[bool]:
        h = self._handle
        return h._retrying(h._add_many, _seq(items))

    def remove(self, item: Any) -> bool:
        h = self._handle
        return h._retrying(h._remove, [item])[0]

    def remove_many(self, items: Iterable[Any]) -> list[bool]:
        h = self._handle
        return h._retrying(h._remove, _seq(items))

    def rebuild(self, items: Iterable[Any], **kwargs: Any) -> int:
        return self._handle._rebuild(items, **kwargs)

    async def acontains(self, item: Any) -> bool:
        h = self._handle
        return await h._aretrying(h._acontains, item)

    async def acontains_many(self, items: Iterable[Any]) -> list[bool]:
        h = self._handle
        return await h._aretrying(h._acontains_many, _seq(items))

    async def aadd(self, item: Any) -> bool:
        h = self._handle
        return await h._aretrying(h._aadd, item)

    async def aadd_many(self, items: Iterable[Any]) -> list[bool]:
        h = self._handle
        return await h._aretrying(h._aadd_many, _seq(items))

    async def aremove(self, item: Any) -> bool:
        h = self._handle
        return (await h._aretrying(h._aremove, [item]))[0]

    async def aremove_many(self, items: Iterable[Any]) -> list[bool]:
        h = self._handle
        return await h._aretrying(h._aremove, _seq(items))

