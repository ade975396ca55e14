"""A handle applies its row's normaliser (``BloomFilter.normalizer``) to every text item,
as a binding's writes, the validator and ``bloom check`` do: ``get_filter("emails")
.contains("Carol@Example.com")`` answers as the validator would.

``handle.without_normalizer`` is the same handle taking items as given, for callers that
have normalised them already (the validator, a binding's writes, its rebuild, the
blocklist, ``bloom measure``'s probes). Normalise exactly once: ``username`` (NFKC, then
casefold) is not idempotent on every input ('ß' + U+0301 -> 'ss' + U+0301 -> 'sś'), so
a second pass could change what is hashed.

The public item operations live here (``ItemOperations``), once for both faces: they
differ only in how they read their items (``_one``, ``_stream``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager
from typing import Any

from django_bloom.conf import get_config
from django_bloom.engine import hashing
from django_bloom.engine.hashers import chunked
from django_bloom.normalizers import get_normalizer, identity

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


class ItemOperations:
    """The public item operations, written once for both faces of a handle: ``Filter``
    passes the items through its row's normaliser (``Normalizing``), ``WithoutNormalizer``
    takes them as given. Each operation reads the items through ``_one`` or ``_stream``
    (a batch: ``_chunks`` of it; the only difference between the faces) and runs the
    private operation (``filter.py``, ``async_filter.py``, ``rebuild.py``) of ``_handle``,
    the live handle (a ``Filter`` is its own, a ``WithoutNormalizer`` holds one), under
    its ``_retrying``/``_aretrying``: no operation reads state from a view."""

    __slots__ = ()  # a WithoutNormalizer holds nothing but its handle
    _handle: Any

    def validate_items(self, items: Iterable[Any]) -> None:
        """Raise TypeError/ValueError as ``add`` would for a bad item; writes nothing."""
        h = self._handle
        for chunk in self._chunks(items):
            hashing.item_datas(chunk, h.encoder)

    # -- sync (filter.py) ---------------------------------------------------
    def contains(self, item: Any) -> bool:
        """False means certainly never added. True means maybe added."""
        h = self._handle
        return h._retrying(h._contains, self._one(item))

    __contains__ = contains

    # A batch is any iterable, a generator too, read BATCH_CHUNK_ITEMS items at a time:
    # one round trip per chunk, each chunk (a write's list or tuple: all of it) validated
    # before any of it is sent.
    # ``count=True`` returns how many answers were True instead of the list.
    def contains_many(self, items: Iterable[Any], *, count: bool = False) -> list[bool] | int:
        return self._batched(self._handle._contains_many, items, count)

    def add(self, item: Any) -> bool:
        """Add one item; True iff it was not (maybe) present before. Atomic."""
        h = self._handle
        return h._retrying(h._add, self._one(item))

    def add_many(self, items: Iterable[Any], *, count: bool = False) -> list[bool] | int:
        return self._batched(self._handle._add_many, items, count, "added")

    def remove(self, item: Any) -> bool:
        """Take one item out (counting layouts only; others raise OperationNotSupported).
        True iff it was (maybe) present; an item that is certainly absent is refused."""
        h = self._handle
        return h._retrying(h._remove, [self._one(item)])[0]

    def remove_many(self, items: Iterable[Any], *, count: bool = False) -> list[bool] | int:
        return self._batched(self._handle._remove, items, count, "removed")

    def rebuild(
        self,
        items: Iterable[Any],
        *,
        capacity: int | None = None,
        error_rate: float | None = None,
        progress: Callable[[int], None] | None = None,
    ) -> int:
        """Replace the filter's content with ``items``; optionally resize.

        The new bitmap is built in this process and uploaded to a separate key,
        then swapped in with RENAME, so readers never see a half-built filter.
        Items added while it runs are journaled by the writers and replayed
        into the new key before the swap. Returns the number of items read.
        Text items go through the row's normaliser (``without_normalizer``: they
        are normalised already).
        """
        return self._handle._rebuild(
            self._stream(items), capacity=capacity, error_rate=error_rate, progress=progress
        )

    def _chunks(self, items: Iterable[Any], whole_first: bool = False) -> Iterator[Sequence[Any]]:
        """Lists of BATCH_CHUNK_ITEMS items, text normalised as read (``_stream``): an
        iterator is read only as far as its chunk; a list or tuple that fits (and needs no
        normalising) is one chunk, itself. ``whole_first`` (writes): a longer list or tuple
        is validated whole before its first chunk, so a bad item writes nothing."""
        size = get_config()["BATCH_CHUNK_ITEMS"]
        read = self._stream(items)
        if read is items and isinstance(items, (list, tuple)) and len(items) <= size:
            yield items  # the common case: no copy
            return
        if whole_first and isinstance(items, (list, tuple)):
            self.validate_items(items)
        yield from chunked(read, size)

    def _batched(self, operation: Callable, items: Iterable[Any], count: bool, done: str = ""):
        """``operation`` (a private batch operation) chunk after chunk (``_chunks``), each
        under ``_retrying``: every answer, or how many were True (``Tally``)."""
        with Tally(count, done) as tally:
            for chunk in self._chunks(items, whole_first=bool(done)):
                tally.add(self._handle._retrying(operation, chunk))
        return tally.result

    # -- async (async_filter.py) --------------------------------------------
    async def acontains(self, item: Any) -> bool:
        """``contains`` for async code: False means certainly never added."""
        h = self._handle
        return await h._aretrying(h._acontains, self._one(item))

    async def acontains_many(
        self, items: Iterable[Any], *, count: bool = False
    ) -> list[bool] | int:
        return await self._abatched(self._handle._acontains_many, items, count)

    async def aadd(self, item: Any) -> bool:
        """``add`` for async code: True iff the item was not (maybe) present before."""
        h = self._handle
        return await h._aretrying(h._aadd, self._one(item))

    async def aadd_many(self, items: Iterable[Any], *, count: bool = False) -> list[bool] | int:
        return await self._abatched(self._handle._aadd_many, items, count, "added")

    async def aremove(self, item: Any) -> bool:
        """``remove`` for async code (counting layouts; others raise OperationNotSupported)."""
        h = self._handle
        return (await h._aretrying(h._aremove, [self._one(item)]))[0]

    async def aremove_many(self, items: Iterable[Any], *, count: bool = False) -> list[bool] | int:
        return await self._abatched(self._handle._aremove, items, count, "removed")

    async def _abatched(self, operation: Callable, items: Iterable[Any], count: bool, done=""):
        """``_batched`` for coroutines (``_aretrying``): each chunk hashed, then sent."""
        with Tally(count, done) as tally:
            for chunk in self._chunks(items, whole_first=bool(done)):
                tally.add(await self._handle._aretrying(operation, chunk))
        return tally.result


class Tally(AbstractContextManager):
    """What a chunked batch answers: every answer in order, or (``count``) how many were
    True. A bad item in a write's later chunk (``done``: "added", "removed") raises the
    same TypeError/ValueError, saying which items before it were written."""

    def __init__(self, count: bool, done: str = ""):
        self.count, self.done, self.read = count, done, 0
        self.result: list[bool] | int = 0 if count else []

    def add(self, answers: list[bool]) -> None:
        self.read += len(answers)
        self.result += answers.count(True) if self.count else answers  # type: ignore[operator]

    def __exit__(self, kind: Any, exc: Any, trace: Any) -> None:
        if isinstance(exc, (TypeError, ValueError)) and self.done and self.read:
            raise (TypeError if isinstance(exc, TypeError) else ValueError)(
                f"{exc} (a batch is read and sent BATCH_CHUNK_ITEMS items at a time: its "
                f"first {self.read:,} items were {self.done}, none from there on)"
            ) from exc


class Normalizing(ItemOperations):
    """Mixed into ``Filter``: the item operations with the row's normaliser. Needs
    ``_normalize`` (set by ``_bind``) and ``_raw``."""

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

    def _stream(self, items: Iterable[Any]) -> Iterable[Any]:
        """Items normalised one by one as they are read (a rebuild's stream, a batch's)."""
        normalize = self._normalize
        if normalize is None:
            return items
        return (normalize(i) if isinstance(i, str) else i for i in items)


class WithoutNormalizer(ItemOperations):
    """``handle.without_normalizer``: the handle's item operations with items taken as
    given (already normalised); every other attribute is the live handle's own (read
    through ``__getattr__`` at each call, so a handle that re-binds after a resize is
    followed, never copied)."""

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

    def _one(self, item: Any) -> Any:
        return item

    def _stream(self, items: Iterable[Any]) -> Iterable[Any]:
        return items
