"""Hashing schemes: an item's bytes -> the 16-byte digest (h1, h2) its positions come from.

A filter row names its scheme in ``BloomFilter.hasher``, the way Django stores
a password's hasher in front of the hash (``identify_hasher``):

- ``"murmur3"``: MurmurHash3 x64-128 with the row's 32-bit seed. Every filter
  created before keyed hashing existed keeps it and answers bit for bit as
  before. Seed-independent multicollisions of MurmurHash3 exist (1,024 valid
  UTF-8 strings sharing one digest for every seed), so whoever controls the
  items can make them all false positives, or fill the filter.
- ``"blake2b$<32 hex digits>"``: keyed BLAKE2b-128 with a random per-filter
  128-bit key (``hashlib.blake2b(data, key=key, digest_size=16)``). Without the
  key, nobody can aim at positions. The default for new filters.

Both give the same 16 bytes (h1 then h2, little-endian), so positions,
layouts, journal, mirror and rebuild are the same for both. The key lives in
the row, like the seed, never derived from ``SECRET_KEY``: rotating
``SECRET_KEY`` must not change every digest (every filter would turn
unavailable, and unbound ones could never be rebuilt). It is never displayed.
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Callable, Iterable, Iterator
from itertools import islice, repeat
from typing import Any

from django_bloom.engine import hashing

MURMUR3 = "murmur3"
BLAKE2B = "blake2b"
SCHEMES = (BLAKE2B, MURMUR3)
DEFAULT = BLAKE2B
KEY_BYTES = 16
BUILD_CHUNK = 10_000  # items hashed and set per step of a build (progress granularity)


class Hasher:
    scheme = ""
    keyed = False

    def digest(self, data: bytes) -> bytes:
        raise NotImplementedError

    def digests(self, datas: list[bytes]) -> bytes:
        return b"".join(map(self.digest, datas))

    def fingerprint_part(self) -> tuple:
        return ()  # legacy fingerprints stay as they were

    def item_digests(self, items: Iterable[Any], encoder: hashing.Encoder | None = None) -> bytes:
        """16 bytes per item, validating every item first (``hashing.item_datas``)."""
        return self.digests(hashing.item_datas(items, encoder))

    def __repr__(self) -> str:
        return f"<{type(self).__name__}>"


class Murmur3(Hasher):
    """MurmurHash3 x64-128 with the filter's seed (format v1; not keyed)."""

    scheme = MURMUR3
    keyed = False

    def __init__(self, seed: int):
        self.seed = seed

    def digest(self, data: bytes) -> bytes:
        return hashing.digest(data, self.seed)

    def digests(self, datas: list[bytes]) -> bytes:
        return b"".join(map(hashing.digest, datas, repeat(self.seed)))


class Blake2b(Hasher):
    """Keyed BLAKE2b, 16-byte digest. The key is never shown (not even in repr)."""

    scheme = BLAKE2B
    keyed = True

    def __init__(self, key: bytes):
        if len(key) != KEY_BYTES:
            raise ValueError(f"a {BLAKE2B} key is {KEY_BYTES} bytes")
        self._base = hashlib.blake2b(key=key, digest_size=16)  # copy() skips re-keying
        check = hashlib.blake2b(b"django-bloom fingerprint", key=key, digest_size=8)
        self._check = check.hexdigest()  # a MAC of a constant: names the key, reveals nothing

    def digest(self, data: bytes) -> bytes:
        h = self._base.copy()
        h.update(data)
        return h.digest()

    def digests(self, datas: list[bytes]) -> bytes:
        copy, out = self._base.copy, []
        for data in datas:  # inlined: ~20% faster than map(self.digest, ...)
            h = copy()
            h.update(data)
            out.append(h.digest())
        return b"".join(out)

    def fingerprint_part(self) -> tuple:
        return (BLAKE2B, self._check)


def identify_hasher(stored: str, seed: int) -> Hasher:
    """The hasher a row's ``hasher`` value names (``""`` is an unmigrated legacy row)."""
    scheme, _, key = (stored or MURMUR3).partition("$")
    if scheme == MURMUR3 and not key:
        return Murmur3(seed)
    if scheme == BLAKE2B:
        try:
            return Blake2b(bytes.fromhex(key))
        except ValueError:
            pass
    raise ValueError(f"unknown or damaged hashing scheme {scheme!r} in a filter row")


def new_hasher_value(scheme: str = DEFAULT) -> str:
    """What a new row stores: the scheme, and for keyed schemes a fresh random key."""
    if scheme == MURMUR3:
        return MURMUR3
    if scheme == BLAKE2B:
        return f"{BLAKE2B}${secrets.token_hex(KEY_BYTES)}"
    raise ValueError(f"unknown hasher {scheme!r}; choose from {', '.join(SCHEMES)}")


def build_bitmap(
    hasher: Hasher,
    items: Iterable[Any],
    builder: hashing.BitmapBuilder,
    encoder: hashing.Encoder | None = None,
    progress: Callable[[int], None] | None = None,
) -> tuple[bytes | bytearray, int]:
    """(bitmap, items read): the bits ``items`` set by ``builder`` (a layout's), in process."""
    count = 0
    for chunk in chunked(items, BUILD_CHUNK):
        builder.add(hasher.item_digests(chunk, encoder))
        count += len(chunk)
        if progress is not None:
            progress(count)
    if progress is not None and count == 0:
        progress(0)
    return builder.tobytes(), count


def chunked(items: Iterable[Any], size: int) -> Iterator[list[Any]]:
    source = iter(items)
    while chunk := list(islice(source, size)):
        yield chunk
