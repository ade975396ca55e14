"""Item -> bit positions. Pure functions: no Django, no Redis.

Format version 1 (``FORMAT_VERSION``), the scheme every path must reproduce
bit for bit (Redis commands, in-process bulk builds, the local mirror):

1. The item becomes bytes: ``str`` as UTF-8, ``bytes``-like as is, ``int`` as
   its decimal ASCII digits (so ``42`` and ``"42"`` are the same item, which
   avoids false "absent" answers when an id arrives as a string from a form).
   ``bool``, ``None`` and anything else raise ``TypeError`` unless the filter
   has an encoder callable, applied first.
2. ``h1, h2`` = the two unsigned 64-bit little-endian halves of a 16-byte
   digest of those bytes, by the filter's scheme (``hashers.py``): ``murmur3``,
   MurmurHash3_x64_128 with the filter's 32-bit seed (``mmh3.hash64(data,
   seed)``; h1 is the first half of the 128-bit digest), or ``blake2b``, keyed
   BLAKE2b with ``digest_size=16`` and the filter's random 128-bit key.
3. Enhanced double hashing (Dillinger & Manolios 2004), closed form, in
   wrapping 64-bit arithmetic::

       g_i = ((h1 + i * h2 + (i**3 - i) // 6) mod 2**64) mod m,   i = 0 .. k-1

   (the standard positions; the one-word layout, ``"blocked"`` in rows, places
   an item's k bits in one 64-bit word instead: ``engine/kinds/blocked.py``).

4. Bit ``g`` lives in byte ``g // 8`` under mask ``0x80 >> (g % 8)``: the
   order Redis uses for SETBIT/GETBIT/BITFIELD.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable
from functools import lru_cache
from itertools import repeat
from typing import Any

import mmh3

MASK64 = (1 << 64) - 1

Encoder = Callable[[Any], "str | bytes | int"]


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


# mmh3 >= 5 has a fast-call digest; hash_bytes gives the same 16 bytes on older versions.
digest = getattr(mmh3, "mmh3_x64_128_digest", None) or mmh3.hash_bytes


def item_datas(items: Iterable[Any], encoder: Encoder | None = None) -> list[bytes]:
    """Every item as the bytes that get hashed (step 1), all validated before any is used.

    Strings are always encoded in Python: mmh3 given a ``str`` with a lone
    surrogate crashes the interpreter (mmh3 5.x), while ``str.encode`` raises
    and ``item_bytes`` turns that into the documented ValueError.
    """
    items = items if isinstance(items, list) else list(items)
    if encoder is None:
        try:  # all str (the common case): one C-level loop; str subclasses encode alike
            return list(map(str.encode, items))
        except (TypeError, UnicodeEncodeError):
            pass  # another type, or one bad string: item_bytes below says which
    return [item_bytes(item, encoder) for item in items]


def item_digests(items: Iterable[Any], seed: int, encoder: Encoder | None = None) -> bytes:
    """16 bytes per item: the MurmurHash3_x64_128 digest, i.e. h1 then h2, little-endian.

    The ``murmur3`` scheme; ``hashers`` has both schemes (``Hasher.item_digests``).
    """
    return b"".join(map(digest, item_datas(items, encoder), repeat(seed)))


PAIR = struct.Struct("<QQ")  # one item digest: h1, h2


def pairs_of(digests: bytes) -> list[tuple[int, int]]:
    return list(PAIR.iter_unpack(digests))


def positions_of(
    pairs: Iterable[tuple[int, int]], positioner: Callable[[int, int], list[int]]
) -> list[int]:
    """k positions per item, item after item, by a layout's positioner."""
    flat: list[int] = []
    for h1, h2 in pairs:
        flat += positioner(h1, h2)
    return flat


@lru_cache(maxsize=64)
def step_constants(num_hashes: int) -> tuple[tuple[int, int], ...]:
    """(i, (i**3 - i) // 6) for i < k: step 3's enhanced double-hashing terms."""
    return tuple((i, (i * i * i - i) // 6) for i in range(num_hashes))


def standard_position_array(digests: bytes, num_bits: int, num_hashes: int):
    """numpy: the standard layout's positions as one uint64 array.

    Wrapping uint64 arithmetic is exactly step 3's ``mod 2**64``.
    """
    np = numpy_module()
    both = np.frombuffer(digests, dtype="<u8").reshape(-1, 2)
    i = np.arange(num_hashes, dtype=np.uint64)
    steps = np.array([c for _i, c in step_constants(num_hashes)], dtype=np.uint64)
    with np.errstate(over="ignore"):
        grid = (both[:, 0:1] + i * both[:, 1:2] + steps) % np.uint64(num_bits)
    return grid.reshape(-1)


def standard_positioner(num_bits: int, num_hashes: int) -> Callable[[int, int], list[int]]:
    """The standard layout: step 3's enhanced double hashing over the whole bitmap."""
    steps = step_constants(num_hashes)
    m = num_bits

    def positions(h1: int, h2: int) -> list[int]:
        return [((h1 + i * h2 + c) & MASK64) % m for i, c in steps]

    return positions


Prober = Callable[[int, int, "bytes | bytearray"], bool]


def prober_of(positioner: Callable[[int, int], list[int]]) -> Prober:
    """``probe(h1, h2, bitmap)`` from a positioner: all of the item's bits set locally?"""

    def probe(h1: int, h2: int, bitmap: bytes | bytearray) -> bool:
        return all(bitmap[g >> 3] & (0x80 >> (g & 7)) for g in positioner(h1, h2))

    return probe


def standard_prober(num_bits: int, num_hashes: int) -> Prober:
    """Return ``probe(h1, h2, bitmap)``: are all k bits of the item set in a local bitmap?

    The standard positions computed one at a time: the probe stops at the
    first clear bit, so an absent item (most checks of a blocklist) costs one
    or two positions instead of k.
    """
    steps = step_constants(num_hashes)
    m = num_bits

    def probe(h1: int, h2: int, bitmap: bytes | bytearray) -> bool:
        for i, c in steps:
            g = ((h1 + i * h2 + c) & MASK64) % m
            if not bitmap[g >> 3] & (0x80 >> (g & 7)):
                return False
        return True

    return probe


def set_bits(bitmap: bytearray, positions: Iterable[int]) -> None:
    """Set bits in an in-process bitmap, Redis bit order (MSB first in each byte)."""
    for g in positions:
        bitmap[g >> 3] |= 0x80 >> (g & 7)


NUMPY_MAX_BITS = 1 << 31  # above this the bool scratch array would be too big; use Python


class BitmapBuilder:
    """Accumulates items' bits for an in-process build (Redis bit order).

    With numpy installed (an optional accelerator, the ``fast`` extra) the
    positions are computed in vectorised wrapping uint64 arithmetic into one
    bool array: bit for bit what the pure-Python path computes (tested both
    ways). Without numpy, or above ``NUMPY_MAX_BITS``, bits go straight into a
    bytearray.
    """

    def __init__(
        self,
        num_bits: int,
        positioner: Callable[[int, int], list[int]],
        position_array: Callable[[bytes], Any],
        use_numpy: bool | None = None,
    ):
        self.position_array = position_array
        np = numpy_module() if use_numpy is not False else None
        self.np = np if num_bits <= NUMPY_MAX_BITS else None
        # Above NUMPY_MAX_BITS (a filter of more than 256 MiB, e.g. a sharded one) numpy
        # still computes the positions and ORs the bits into packed bytes (m/8 bytes of
        # memory, ~5x faster than Python per bit).
        self.packed = np.zeros((num_bits + 7) // 8, dtype=np.uint8) if np and not self.np else None
        if self.np is not None:
            self.bits = self.np.zeros(num_bits, dtype=bool)
        elif self.packed is None:
            self.bitmap = bytearray((num_bits + 7) // 8)
            self.pos = positioner

    def add(self, digests: bytes) -> None:
        """Set the bits of items given as ``item_digests`` output."""
        if not digests:
            return
        if self.packed is not None:
            np, grid = numpy_module(), self.position_array(digests)
            masks = (np.uint8(0x80) >> (grid & np.uint64(7)).astype(np.uint8)).astype(np.uint8)
            np.bitwise_or.at(self.packed, (grid >> np.uint64(3)).astype(np.intp), masks)
            return
        if self.np is None:
            bitmap, pos = self.bitmap, self.pos
            for h1, h2 in pairs_of(digests):
                for g in pos(h1, h2):
                    bitmap[g >> 3] |= 0x80 >> (g & 7)
            return
        grid = self.position_array(digests)
        self.bits[grid.astype(self.np.intp)] = True

    def tobytes(self) -> bytes | bytearray | memoryview:
        if self.packed is not None:
            return memoryview(self.packed)  # no copy of a big bitmap
        if self.np is None:
            return self.bitmap
        return self.np.packbits(self.bits).tobytes()  # packbits: MSB first


@lru_cache(maxsize=1)
def numpy_module():
    """numpy if installed (the optional ``fast`` extra), else None."""
    try:
        import numpy
    except ImportError:
        return None
    return numpy
