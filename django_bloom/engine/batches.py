"""A large batch's items, hashed when the layout asks: chunk by chunk, or all at once.

``Filter.add_many``/``contains_many`` validate every item first (``item_datas``:
bad input writes nothing), then hand the layout a ``Batch``. A layout that
streams (``Layout.contains_batch``/``add_batch`` on one segment) iterates
``chunks()``: each chunk is hashed only when storage has sent the previous
one, so Redis works while Python hashes. A layout that does not calls
``whole()``: one hashing pass, exactly as before. Either way ``digests`` and
``flats`` keep what was made (the journal and the mirror need them).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

from django_bloom.engine.transport.packing import stream_chunks


class Batch:
    def __init__(
        self,
        datas: list[bytes],
        digests_of: Callable[[list[bytes]], bytes],
        positions_of: Callable[[bytes], Sequence[int]],
        chunk_items: int,
    ):
        self.datas = datas
        self._digests_of = digests_of
        self._positions_of = positions_of
        self.chunk_items = chunk_items
        self.digests: list[bytes] = []  # per chunk (one entry after whole())
        self.flats: list[Any] = []  # per chunk: its flat positions

    def __len__(self) -> int:
        return len(self.datas)

    def chunks(self) -> Iterator[Sequence[int]]:
        """Flat positions chunk by chunk (``packing.stream_chunks``), hashed lazily."""
        for start, stop in stream_chunks(len(self.datas), self.chunk_items):
            yield self._made(self.datas[start:stop])

    def whole(self) -> Sequence[int]:
        """Every item's flat positions, hashed in one pass."""
        return self._made(self.datas)

    def all_digests(self) -> bytes:
        return b"".join(self.digests)

    def _made(self, datas: list[bytes]) -> Sequence[int]:
        digests = self._digests_of(datas)
        flat = self._positions_of(digests)
        self.digests.append(digests)
        self.flats.append(flat)
        return flat
