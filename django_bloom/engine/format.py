"""The stored format, in one place: key names, the trailer, the format version.

One filter segment is one Redis string (format v1)::

    [ bitmap: ceil(m/8) bytes ][ trailer: 16 bytes ]
    trailer = fingerprint u32 | flags u8 | write stamp u24 | write counter i64

Key names: ``<prefix>:{<filter>}:v1:[<generation>:]bits`` for the bitmap, and
``build``, ``journal``, ``lock`` and ``counters`` beside it. The ``{name}``
hash tag keeps all of a filter's keys in one cluster slot. Only the bits key
carries the generation: a handle with another geometry then reads and writes a
key that is not the live one.
"""

from __future__ import annotations

import random
import re
import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import mmh3

FORMAT_VERSION = 1
KEY_VERSION = f"v{FORMAT_VERSION}"

# The trailer: fingerprint u32 | flags u8 | write stamp u24 | write counter i64.
TRAILER = struct.Struct(">IB3xq")
TRAILER_BYTES = TRAILER.size
FINGERPRINT_BYTES = 4
FLAGS_BIT = 32  # bit offsets inside the trailer (BITFIELD and the Lua scripts use these)
STAMP_BIT = 40
COUNTER_BIT = 64
STAMP_AND_COUNTER = slice(5, TRAILER_BYTES)  # what every write changes: a mirror's version
_STAMPED = struct.Struct(">IB3sq")
FLAG_REBUILDING = 0x01


@dataclass(frozen=True)
class Keys:
    bits: str
    build: str
    journal: str
    lock: str
    counters: str


def filter_keys(prefix: str, name: str, generation: str = "") -> Keys:
    """A filter's key names. ``generation`` "": the bits key of rows made before generations."""
    base = f"{prefix}:{{{name}}}:{KEY_VERSION}"
    bits = f"{base}:{generation}:bits" if generation else f"{base}:bits"
    return Keys(bits, f"{base}:build", f"{base}:journal", f"{base}:lock", f"{base}:counters")


def bits_pattern(prefix: str, name: str) -> str:
    """SCAN pattern matching a filter's bits keys of every generation."""
    escaped = re.sub(r"([*?\[\]\\])", r"\\\1", prefix)
    return f"{escaped}:\\{{{name}\\}}:{KEY_VERSION}:*bits"


def fingerprint(
    version: int, num_bits: int, num_hashes: int, seed: int, layout: str, extra: Sequence = ()
) -> int:
    """The trailer's non-zero u32 naming one filter's format, geometry, seed, layout and
    (keyed hashers: ``extra``) hashing scheme; a key of another filter never matches."""
    text = "|".join(map(str, ("django-bloom", version, num_bits, num_hashes, seed, layout, *extra)))
    return mmh3.hash(text.encode(), 0, signed=False) or 1


# A journal entry (writes made while a rebuild runs): the items' (h1, h2), 16 bytes each.
JOURNAL_PAIR = struct.Struct(">QQ")


def pack_journal(pairs: Iterable[tuple[int, int]]) -> bytes:
    return b"".join(JOURNAL_PAIR.pack(h1, h2) for h1, h2 in pairs)


def unpack_journal(entries: Iterable[bytes]) -> list[tuple[int, int]]:
    return [pair for entry in entries for pair in JOURNAL_PAIR.iter_unpack(entry)]


def trailer(fingerprint: int, flags: int = 0, counter: int = 0, stamp: int = 0) -> bytes:
    return _STAMPED.pack(fingerprint, flags, stamp.to_bytes(3, "big"), counter)


def new_stamp() -> int:
    """24 random bits each write sets (engine/mirror.py); 0 in keys of earlier releases."""
    return random.getrandbits(24)


def fingerprint_bytes(fingerprint: int) -> bytes:
    """The trailer's first bytes as stored (what GETRANGE of the fingerprint returns)."""
    return trailer(fingerprint)[:FINGERPRINT_BYTES]


_LUA_CONSTANTS = {"TB": TRAILER_BYTES, "FLAGS_BIT": FLAGS_BIT, "COUNTER_BIT": COUNTER_BIT}


def lua(script: str) -> str:
    """Spell the trailer constants into a script (``$TB``, ``$FLAGS_BIT``, ``$COUNTER_BIT``)."""
    for name, value in sorted(_LUA_CONSTANTS.items(), key=lambda kv: -len(kv[0])):
        script = script.replace(f"${name}", str(value))
    return script
