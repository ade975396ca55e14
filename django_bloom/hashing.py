"""Sizing math and item -> bit positions. Pure functions: no Django, no Redis.

Format version 1 (``FORMAT_VERSION``), the scheme every path must reproduce
bit for bit (Redis commands, in-process bulk builds, the local mirror):

1. The item becomes bytes: ``str`` as UTF-8, ``bytes``-like as is, ``int`` as
   its decimal ASCII digits (so ``42`` and ``"42"`` are the same item, which
   avoids false "absent" answers when an id arrives as a string from a form).
   ``bool``, ``None`` and anything else raise ``TypeError`` unless the filter
   has an encoder callable, applied first.
2. ``h1, h2`` = the two unsigned 64-bit halves of MurmurHash3_x64_128 of those
   bytes with the filter's 32-bit seed (``mmh3.hash64(data, seed)``; h1 is the
   first half of the 128-bit digest).
3. Enhanced double hashing (Dillinger & Manolios 2004), closed form, in
   wrapping 64-bit arithmetic::

       g_i = ((h1 + i * h2 + (i**3 - i) // 6) mod 2**64) mod m,   i = 0 .. k-1

4. Bit ``g`` lives in byte ``g // 8`` under mask ``0x80 >> (g % 8)``: the
   order Redis uses for SETBIT/GETBIT/BITFIELD.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import mmh3

FORMAT_VERSION = 1
MASK64 = (1 << 64) - 1
LN2 = math.log(2)

Encoder = Callable[[Any], "str | bytes | int"]


def optimal_num_bits(capacity: int, error_rate: float) -> int:
    """m = ceil(-n ln p / (ln 2)^2)."""
    validate_sizing(capacity, error_rate)
    return math.ceil(-capacity * math.log(error_rate) / (LN2 * LN2))


def optimal_num_hashes(num_bits: int, capacity: int) -> int:
    """k = round(m / n * ln 2), at least 1."""
    return max(1, round(num_bits / capacity * LN2))


def validate_sizing(capacity: Any, error_rate: Any) -> None:
    if isinstance(capacity, bool) or not isinstance(capacity, int):
        raise TypeError(f"capacity must be an int, got {type(capacity).__name__}")
    if capacity < 1:
        raise ValueError(f"capacity must be at least 1, got {capacity}")
    if isinstance(error_rate, bool) or not isinstance(error_rate, (int, float)):
        raise TypeError(f"error_rate must be a float, got {type(error_rate).__name__}")
    if not 0 < error_rate < 1 or math.isnan(error_rate):
        raise ValueError(f"error_rate must lie strictly between 0 and 1, got {error_rate}")


def expected_fpr(num_bits: int, num_items: float, num_hashes: int) -> float:
    """False-positive rate expected after ``num_items`` insertions: (1 - e^(-kn/m))^k."""
    if num_items <= 0:
        return 0.0
    return (1.0 - math.exp(-num_hashes * num_items / num_bits)) ** num_hashes


def estimate_items(num_bits: int, num_hashes: int, bits_set: int) -> float:
    """Swamidass & Baldi estimate of distinct items from set bits: -(m/k) ln(1 - X/m)."""
    if bits_set >= num_bits:
        return math.inf
    return -(num_bits / num_hashes) * math.log1p(-bits_set / num_bits)


def fill_fpr(num_bits: int, bits_set: int, num_hashes: int) -> float:
    """Current false-positive rate from the fill ratio: (X/m)^k."""
    return (bits_set / num_bits) ** num_hashes


def item_bytes(item: Any, encoder: Encoder | None = None) -> bytes:
    """Turn one item into the bytes that get hashed (step 1 of the scheme)."""
    if encoder is not None and item is not None:
        item = encoder(item)
    if isinstance(item, str):
        try:
            return item.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise ValueError(f"item is not valid Unicode text: {exc}") from None
    if isinstance(item, (bytes, bytearray, memoryview)):
        return bytes(item)
    if isinstance(item, int) and not isinstance(item, bool):
        return str(item).encode("ascii")
    if item is None:
        raise TypeError("None cannot be a Bloom filter item")
    raise TypeError(
        f"unsupported item type {type(item).__name__}: use str, bytes or int, "
        "or give the filter an encoder"
    )


def hash_pair(data: bytes, seed: int) -> tuple[int, int]:
    """(h1, h2): the two unsigned 64-bit halves of MurmurHash3_x64_128."""
    return mmh3.hash64(data, seed, signed=False)


def make_positioner(num_bits: int, num_hashes: int) -> Callable[[int, int], list[int]]:
    """Return ``f(h1, h2) -> [g_0 .. g_{k-1}]`` for one filter's geometry."""
    steps = [(i, (i * i * i - i) // 6) for i in range(num_hashes)]
    m = num_bits

    def positions(h1: int, h2: int) -> list[int]:
        return [((h1 + i * h2 + c) & MASK64) % m for i, c in steps]

    return positions


def bit_positions(
    item: Any, seed: int, num_bits: int, num_hashes: int, encoder: Encoder | None = None
) -> list[int]:
    """All k bit positions of one item (convenience; hot paths use make_positioner)."""
    h1, h2 = hash_pair(item_bytes(item, encoder), seed)
    return make_positioner(num_bits, num_hashes)(h1, h2)


def set_bits(bitmap: bytearray, positions: Iterable[int]) -> None:
    """Set bits in an in-process bitmap, Redis bit order (MSB first in each byte)."""
    for g in positions:
        bitmap[g >> 3] |= 0x80 >> (g & 7)


def test_bits(bitmap: bytes | bytearray, positions: Iterable[int]) -> bool:
    return all(bitmap[g >> 3] & (0x80 >> (g & 7)) for g in positions)


def hash_pairs(
    items: Iterable[Any], seed: int, encoder: Encoder | None = None
) -> list[tuple[int, int]]:
    """(h1, h2) for many items, with a fast path for plain ``str``.

    Strings are always encoded in Python first: mmh3 given a ``str`` with a
    lone surrogate crashes the interpreter (mmh3 5.x), while ``str.encode``
    raises, and ``item_bytes`` turns that into the documented ValueError.
    """
    h64 = mmh3.hash64
    items = items if isinstance(items, list) else list(items)
    if encoder is None and all(type(item) is str for item in items):
        try:
            return [h64(item.encode(), seed, signed=False) for item in items]
        except UnicodeEncodeError:
            pass  # one bad string: the loop below raises the documented ValueError
    out = []
    for item in items:
        if encoder is None and type(item) is str:
            try:
                out.append(h64(item.encode(), seed, signed=False))
                continue
            except UnicodeEncodeError:
                pass
        out.append(h64(item_bytes(item, encoder), seed, signed=False))
    return out


NUMPY_MAX_BITS = 1 << 31  # above this the bool scratch array would be too big; use Python


class BitmapBuilder:
    """Accumulates items' bits for an in-process build (Redis bit order).

    With numpy installed (an optional accelerator, the ``fast`` extra) the
    positions are computed in vectorised wrapping uint64 arithmetic into one
    bool array: bit for bit what the pure-Python path computes (tested both
    ways). Without numpy, or above ``NUMPY_MAX_BITS``, bits go straight into a
    bytearray.
    """

    def __init__(self, num_bits: int, num_hashes: int, use_numpy: bool | None = None):
        self.num_bits, self.num_hashes = num_bits, num_hashes
        self.np = _numpy() if use_numpy is not False and num_bits <= NUMPY_MAX_BITS else None
        if self.np is not None:
            self.bits = self.np.zeros(num_bits, dtype=bool)
        else:
            self.bitmap = bytearray((num_bits + 7) // 8)
            self.pos = make_positioner(num_bits, num_hashes)

    def add(self, pairs: Sequence[tuple[int, int]]) -> None:
        if not pairs:
            return
        np = self.np
        if np is None:
            bitmap, pos = self.bitmap, self.pos
            for h1, h2 in pairs:
                for g in pos(h1, h2):
                    bitmap[g >> 3] |= 0x80 >> (g & 7)
            return
        both = np.array(pairs, dtype=np.uint64)
        h1, h2 = both[:, 0], both[:, 1]
        m = np.uint64(self.num_bits)
        with np.errstate(over="ignore"):
            for i in range(self.num_hashes):
                g = (h1 + np.uint64(i) * h2 + np.uint64((i**3 - i) // 6)) % m
                self.bits[g.astype(np.intp)] = True

    def tobytes(self) -> bytes | bytearray:
        if self.np is None:
            return self.bitmap
        return self.np.packbits(self.bits).tobytes()  # packbits: MSB first


def build_bitmap(
    pairs: Sequence[tuple[int, int]], num_bits: int, num_hashes: int, use_numpy: bool | None = None
) -> bytes | bytearray:
    builder = BitmapBuilder(num_bits, num_hashes, use_numpy)
    builder.add(pairs)
    return builder.tobytes()


def _numpy():
    try:
        import numpy
    except ImportError:
        return None
    return numpy
