"""The dump format: a filter's row and its bits as a stream of records, each with its CRC-32
(``Filter.dump`` writes one, ``Filter.load`` and ``load_filter`` read one; docs/transfer.md).

    dump   = MAGIC record...
    record = tag (1 byte) | body length (u32) | body | CRC-32 of tag, length and body (u32)

- ``H``, the header, first: UTF-8 JSON. ``format`` (``VERSION``), the row (kind, layout,
  capacity, error rate, geometry, seed, hasher, options, normaliser ...), ``items_added``
  and the kind's ``state`` (a scalable filter's sub-filter count).
- ``C``, a chunk: part name length (u16) | part name (UTF-8) | position (u64) | data, at
  most ``MAX_CHUNK_BYTES``. A part is one Redis string (a segment, a sub-filter, a family
  member); the position is the data's byte offset in it (a native part's: the
  ``BF.SCANDUMP`` iterator, its chunk split over records of the same position).
- ``E``, the end, last: JSON ``{"chunks": N}``, so a dump cut at a record boundary is known.

Integers are big-endian. Pure: no Redis, no Django.
"""

from __future__ import annotations

import json
import struct
import zlib
from collections.abc import Iterator
from typing import IO, Any

from django_bloom.exceptions import DumpInvalid

MAGIC = b"django-bloom dump\n"
VERSION = 1
MAX_CHUNK_BYTES = 10 * 1024 * 1024
_FRAME = struct.Struct(">cI")
_CRC = struct.Struct(">I")
_PART = struct.Struct(">H")
_POSITION = struct.Struct(">Q")
_MAX_BODY = MAX_CHUNK_BYTES + _PART.size + 0xFFFF + _POSITION.size


def _record(tag: bytes, *body: bytes) -> list[bytes]:
    """A record's pieces (the data is not copied into one string)."""
    head = _FRAME.pack(tag, sum(map(len, body)))
    crc = zlib.crc32(head)
    for piece in body:
        crc = zlib.crc32(piece, crc)
    return [head, *body, _CRC.pack(crc)]


def header_record(header: dict[str, Any]) -> list[bytes]:
    return [MAGIC, *_record(b"H", json.dumps({"format": VERSION, **header}).encode())]


def chunk_record(part: str, position: int, data: bytes) -> list[bytes]:
    name = part.encode()
    return _record(b"C", _PART.pack(len(name)) + name + _POSITION.pack(position), data)


def end_record(chunks: int) -> list[bytes]:
    return _record(b"E", json.dumps({"chunks": chunks}).encode())


class DumpReader:
    """Reads a dump from a binary stream: ``header`` at once, then ``chunks()``; every
    record's checksum is verified before it is handed on, and a missing end raises.
    ``progress(bytes of data read, the header's "bytes")`` after each chunk."""

    def __init__(self, stream: IO[bytes], progress: Any = None):
        self.stream, self.count, self.done, self.progress = stream, 0, 0, progress
        start = self._read(len(MAGIC))
        if start != MAGIC:
            raise DumpInvalid(f"not a django-bloom dump (it starts with {start[:24]!r})")
        tag, body = self._record()
        if tag != b"H":
            raise DumpInvalid("a django-bloom dump without its header: corrupt")
        try:
            self.header: dict[str, Any] = json.loads(body)
        except ValueError:
            raise DumpInvalid("the dump's header is not JSON: corrupt") from None
        if self.header.get("format") != VERSION:
            raise DumpInvalid(
                f"dump format {self.header.get('format')!r}: this release reads format "
                f"{VERSION} (export it again with this release)"
            )

    def _read(self, size: int) -> bytes:
        data = self.stream.read(size)
        while len(data) < size:
            more = self.stream.read(size - len(data))
            if not more:
                break
            data += more
        return data

    def _record(self) -> tuple[bytes, bytes]:
        where = f"record {self.count + 1}"
        head = self._read(_FRAME.size)
        if len(head) < _FRAME.size:
            raise DumpInvalid(f"the dump ends before its end record ({where}): truncated")
        tag, size = _FRAME.unpack(head)
        if size > _MAX_BODY or tag not in b"HCE":
            raise DumpInvalid(f"{where} has a damaged frame (tag {tag!r}, {size:,} bytes): corrupt")
        body, crc = self._read(size), self._read(_CRC.size)
        if len(crc) < _CRC.size:
            raise DumpInvalid(f"the dump ends inside {where}: truncated")
        if _CRC.unpack(crc)[0] != zlib.crc32(body, zlib.crc32(head)):
            raise DumpInvalid(f"{where} fails its checksum: the dump is corrupt")
        return tag, body

    def chunks(self) -> Iterator[tuple[str, int, bytes]]:
        """(part, position, data) of every chunk, in order; the end record checked last."""
        while True:
            tag, body = self._record()
            if tag == b"E":
                break
            if tag != b"C":
                raise DumpInvalid(f"record {self.count + 1}: a second header: corrupt")
            self.count += 1
            size = _PART.unpack_from(body)[0]
            at = _PART.size + size
            part = body[_PART.size : at].decode("utf-8", "replace")
            self.done += len(body) - at - _POSITION.size
            if self.progress is not None:
                self.progress(self.done, self.header.get("bytes"))
            yield part, _POSITION.unpack_from(body, at)[0], memoryview(body)[at + _POSITION.size :]
        if json.loads(body).get("chunks") != self.count:
            raise DumpInvalid(f"the dump's end record does not count its {self.count} chunks")
        if self.stream.read(1):
            raise DumpInvalid("data after the dump's end record: corrupt")
