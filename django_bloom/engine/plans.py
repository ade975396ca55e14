"""Plans: what a layout operation sends and how its reply reads, without any I/O.

A ``Plan`` is the transport-free half of a hot-path operation: the RESP bytes
of its commands (pipelined: one round trip) and ``finish``, which turns the
parsed replies (one per command, as redis-py's parser returns them) into the
operation's result, raising ``FilterKeyMissing`` when a trailer does not match.
Two transports run the same plans:

- ``Storage.run(plan)`` (sync, the engine's kept connections, connections.py);
- ``AsyncEngineConnection.run(plan)`` (asyncio, engine/transport/aio.py).

So a layout written as plans (``Layout.contains_plan`` / ``add_plan`` /
``remove_plan``) works in both worlds with one piece of logic. The bytes are
those of the sync hot path (``packing.pack_test`` / ``pack_set`` /
``pack_words``): the sync ``Storage.test`` / ``set`` keep their own leaner
readers, and tests/engine/test_async.py checks that both send the same commands.

A write that finds no trailer at all (fingerprint 0: it just created a key that
is nobody's) raises ``StrayKey``; the transport drops that key (one more round
trip, the error path only, ``scripts.DROP_STRAY``) and re-raises it: it is a
``FilterKeyMissing``, so callers treat it as one.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from django_bloom.engine.format import FLAG_REBUILDING
from django_bloom.engine.segment import WriteResult
from django_bloom.engine.segment import key_missing as _key_missing
from django_bloom.engine.transport.packing import (
    Packed,
    ReplyError,
    header,
    pack_set,
    pack_test,
    pack_words,
    per_item,
    split_reply,
)
from django_bloom.exceptions import FilterKeyMissing, WriteNotReplicated


class StrayKey(FilterKeyMissing):
    """A write created (or grew) a key that holds no trailer: drop ``key``, then re-raise."""

    def __init__(self, message: str, key: str):
        super().__init__(message)
        self.stray_key = key  # transports read this attribute (storage cannot import plans)


@dataclass(frozen=True)
class Plan:
    """Commands to send in one round trip, and how to read their replies.

    ``payload``: RESP bytes of ``replies`` commands. ``finish(replies)`` gets the
    parsed replies in order (a reply may be an ``Exception`` instance: raise it
    as ``ReplyError``). ``durable``: a write (``WRITE_REPLICAS`` adds a WAIT).
    """

    payload: bytes
    replies: int
    finish: Callable[[list[Any]], Any]
    durable: bool = False

    def then(self, after: Callable[[Any], Any]) -> Plan:
        """The same commands; ``after`` applied to the result (a layout's own reading)."""
        first = self.finish
        return Plan(self.payload, self.replies, lambda replies: after(first(replies)), self.durable)

    def settle(self, replies: list[Any], unreplicated: WriteNotReplicated | None) -> Any:
        """``finish(replies)`` (a refusal raises first), then the WAIT shortfall: kept on a
        ``WriteResult`` (``reported`` raises it after the journal), else raised."""
        result = self.finish(replies)
        if unreplicated is not None:
            if not isinstance(result, WriteResult):
                raise unreplicated
            result.unreplicated = unreplicated
        return result


def command(*args: str | bytes | int) -> bytes:
    """One command as RESP bytes (for plans of layouts with their own commands)."""
    return header(len(args), *(str(a) if isinstance(a, int) else a for a in args))


def _raise_errors(replies: Sequence[Any]) -> None:
    for reply in replies:
        if isinstance(reply, Exception):
            raise ReplyError(str(reply))


def _plan(packed: Packed, finish: Callable[[list[Any]], Any], durable: bool = False) -> Plan:
    def read(replies: list[Any]) -> Any:
        _raise_errors(replies)
        return finish(replies)

    return Plan(packed.payload, len(packed.shapes), read, durable)


def test_plan(segment: Any, flat: Sequence[int]) -> Plan:
    """``Storage.test`` as a plan: per item, whether all its k bits are set."""
    packed = pack_test(segment, flat)

    def finish(replies: list[Any]) -> list[bool]:
        out: list[bool] = []
        for reply, (head, _ops, tail), order in zip(
            replies, packed.shapes, packed.orders, strict=True
        ):
            first, bits, _ = split_reply(reply, head, tail)
            if first[0] != segment.fingerprint:
                raise _key_missing(segment)
            out += per_item(bits, order, segment.num_hashes, want_all=True)
        return out

    return _plan(packed, finish)


def set_plan(segment: Any, flat: Sequence[int]) -> Plan:
    """``Storage.set`` as a plan: per item, whether any of its bits was clear."""
    packed = pack_set(segment, flat)

    def finish(replies: list[Any]) -> WriteResult:
        was_new: list[bool] = []
        rebuilding = False
        for reply, (head, _ops, tail), order in zip(
            replies, packed.shapes, packed.orders, strict=True
        ):
            first, bits, _ = split_reply(reply, head, tail)
            found = first[0] >> 8
            if found != segment.fingerprint:
                missing = _key_missing(segment)
                if found == 0:
                    raise StrayKey(str(missing), segment.keys.bits)
                raise missing
            rebuilding = rebuilding or bool(first[0] & FLAG_REBUILDING)
            was_new += per_item(bits, order, segment.num_hashes, want_all=False)
        return WriteResult(was_new, rebuilding)

    return _plan(packed, finish, durable=True)


def words_plan(segment: Any, words: Sequence[int]) -> Plan:
    """``Storage.read_words`` as a plan: per command, (the words read, their order)."""
    packed = pack_words(segment, words)

    def finish(replies: list[Any]) -> list[tuple[list[int], Any]]:
        out = []
        for reply, (head, _ops, tail), order in zip(
            replies, packed.shapes, packed.orders, strict=True
        ):
            first, got, _ = split_reply(reply, head, tail, as_bits=False)
            if first[0] != segment.fingerprint:
                raise _key_missing(segment)
            out.append((got, order))
        return out

    return _plan(packed, finish)
