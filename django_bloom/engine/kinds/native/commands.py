"""Redis commands of native filters (layout ``native``): a RedisBloom key, BF.* commands.

The filter is one RedisBloom key (type ``MBbloom--``) at the row's bits key name,
made by ``BF.RESERVE key p n+1 NONSCALING`` and, at once, given a **sentinel** item
naming the filter (its fingerprint: geometry, seed, hashing key). Every hot-path call
is one round trip that checks the key in the same atomic command as its work:

- contains: ``BF.MEXISTS key sentinel items...``: the sentinel answers 1, or the key
  is not this filter's: missing (``BF.MEXISTS`` answers 0 on a missing key), flushed,
  or a RedisBloom key someone else made there (it lacks the sentinel: a false pass has
  the chance p of a false positive). Another type answers ``WRONGTYPE``;
- add: ``EXISTS lock`` (a rebuild runs: journal these items), then ``BF.INSERT key
  NOCREATE ITEMS items...`` (the ``BF.MADD`` that never creates a key: a missing one
  answers "not found", another type ``WRONGTYPE``). A RedisBloom key someone else made
  at the name takes the items (as a standard filter's write sets bits in a foreign key
  before it reads the trailer) but never the sentinel: reads keep refusing it.

Each failed check is ``FilterKeyMissing``, never a false "absent". Why not a Lua script
(``TYPE``/``BF.INFO``, then the command): a script costs ~1 us of server time per item
converting arguments and replies (a 1,000-item ``BF.MADD`` took 707 us inside
``EVALSHA`` against 341 us bare), and ``BF.INFO`` alone costs 3-5x a ``BF.EXISTS``; a
``MULTI``/``EXEC`` around them cost a single add ~40% more wall time than ``BF.ADD``
(five replies). The sentinel costs one item more.

Lifecycle scripts (create, clear, journal, swap, info) are rare and use Lua.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from itertools import groupby
from operator import itemgetter
from typing import Any

from django_bloom.engine.plans import Plan
from django_bloom.engine.segment import WriteResult
from django_bloom.engine.transport.connections import slow
from django_bloom.engine.transport.packing import arguments, header
from django_bloom.exceptions import BloomError, RedisRefused

MODULE_TYPE = "MBbloom--"
MODULE_COMMANDS = ("BF.RESERVE", "BF.INSERT", "BF.EXISTS", "BF.MEXISTS", "BF.INFO")
# Items per command: ~0.3 ms of server time for 1,024 (a big batch is several
# commands, pipelined: one round trip, and Redis serves others between them).
CHUNK_ITEMS = 1024
CHUNKS_PER_TRIP = 8  # a rebuild's fill: commands per round trip
BUILD_TTL_SECONDS = 3600
_DIGEST = b"$16\r\n"  # a keyed item: its 16-byte digest


class RedisBloomMissing(RedisRefused, ValueError):
    """The Redis of a native filter has no RedisBloom (no ``BF.*`` commands).

    A ``ValueError`` for ``create_filter`` (a layout this server cannot hold; nothing
    is written); a ``FilterUnavailable`` for a filter that exists (callers fall back).
    """


class NativeFilterFull(RedisRefused):
    """RedisBloom refuses new items past a NONSCALING filter's capacity."""


_HEADS = [b"$%d\r\n" % size for size in range(256)]  # bulk headers of short items


def items_payload(items: Sequence[bytes], digests: bool = False) -> bytes:
    """Items as RESP bulk strings. ``digests`` (16 bytes each): one join, no formatting."""
    if digests:
        return _DIGEST + b"\r\n$16\r\n".join(items) + b"\r\n" if items else b""
    heads = _HEADS
    try:  # ~40% faster than formatting each item (measured)
        return b"".join([heads[len(item)] + item + b"\r\n" for item in items])
    except IndexError:  # an item of 256 bytes or more
        return b"".join([b"$%d\r\n%s\r\n" % (len(item), item) for item in items])


def chunks(items: Sequence[bytes], size: int = CHUNK_ITEMS) -> list[Sequence[bytes]]:
    return [items[i : i + size] for i in range(0, len(items), size)] or [items]


def info_fields(info: Any) -> dict[str, Any]:
    """``BF.INFO``'s reply (a flat list in RESP2, a map in RESP3) as a dict."""
    if isinstance(info, dict):
        pairs = info.items()
    else:
        pairs = zip(info[0::2], info[1::2], strict=True)
    return {(k.decode() if isinstance(k, bytes) else str(k)): v for k, v in pairs}


class Target:
    """The hot path on one native key: its name, its sentinel, the rebuild lock's name,
    and how to say the key is missing. Per chunk of ``CHUNK_ITEMS`` items:

    - contains: ``BF.MEXISTS key sentinel items...``: one command, one reply;
    - add: ``EXISTS lock``, then ``BF.INSERT key NOCREATE ITEMS items...``: two
      commands, one round trip (see ``add_plan``).
    """

    def __init__(
        self,
        key: str,
        sentinel: bytes,
        lock: str,
        missing: Callable[[], BloomError],
        digests: bool = False,
    ):
        self.key, self.lock, self.missing, self.digests = key, lock, missing, digests
        self.exists_lock = header(2, "EXISTS", lock)
        # The fixed arguments of every command, packed once (the hot path adds the items).
        self._mexists = arguments("BF.MEXISTS", key, sentinel)
        self._insert = arguments("BF.INSERT", key, "NOCREATE", "ITEMS")

    def contains_plan(self, items: Sequence[bytes]) -> Plan:
        if len(items) == 1:
            payload = b"*4\r\n" + self._mexists + items_payload(items, self.digests)
            return Plan(payload, 1, self._found)
        parts = [
            b"*%d\r\n" % (3 + len(chunk)) + self._mexists + items_payload(chunk, self.digests)
            for chunk in chunks(items)
        ]
        return Plan(b"".join(parts), len(parts), self._found)

    def _found(self, replies: list[Any]) -> list[bool]:
        out: list[bool] = []
        for reply in replies:
            _raise_error(reply, self.missing)
            if reply[0] != 1:  # no sentinel: missing (all zeros), or not this filter's
                raise self.missing()
            out += map(bool, reply[1:])
        return out

    def add_plan(self, items: Sequence[bytes]) -> Plan:
        """Per item was-new; ``rebuilding``: the lock existed (journal these items).

        ``EXISTS lock`` goes first, in the same round trip: a write that finds no lock
        began before the rebuild took it, so its item is in the source the rebuild reads
        afterwards (the standard layout's rule: an item enters its source before it is
        added); one that finds it is journaled after its insert."""
        parts = [self.exists_lock]
        for chunk in chunks(items):
            head = b"*%d\r\n" % (4 + len(chunk))
            parts.append(head + self._insert + items_payload(chunk, self.digests))
        return Plan(b"".join(parts), len(parts), self._added, durable=True)

    def _added(self, replies: list[Any]) -> WriteResult:
        was_new: list[bool] = []
        for added in replies[1:]:
            _raise_error(added, self.missing)
            was_new += map(bool, added)  # 1/0, or True/False on a RESP3 connection
            if added.count(1) + added.count(0) == len(added):
                continue  # no error among them (counted in C: no loop per item)
            for flag in added:
                if isinstance(flag, Exception):
                    if "full" not in str(flag):
                        raise BloomError(f"RedisBloom refused an item: {flag}")
                    raise NativeFilterFull(
                        f"native filter {self.key!r} is full: RedisBloom refuses new items "
                        "past its capacity (a NONSCALING filter); the items before it were "
                        "added. Rebuild it larger (manage.py bloom rebuild NAME --capacity N, "
                        "or Filter.rebuild(items, capacity=N))."
                    )
        return WriteResult(was_new, bool(replies[0]))


def _raise_error(reply: Any, missing: Callable[[], BloomError]) -> None:
    """An error reply: a missing key ("not found") or another type is ``missing()``."""
    if isinstance(reply, Exception):
        text = str(reply)
        if "not found" in text or "WRONGTYPE" in text or "wrong kind" in text:
            raise missing()
        raise BloomError(f"RedisBloom refused a command: {text}")


# -- lifecycle (Lua: rare, and atomic) ---------------------------------------------------
# KEYS[1] key; ARGV error rate, capacity, replace ("1"/"0"), ttl ("0": none), sentinel.
CREATE = """
if redis.call('EXISTS', KEYS[1]) == 1 then
  if ARGV[3] ~= '1' then return 0 end
  redis.call('UNLINK', KEYS[1])
end
redis.call('BF.RESERVE', KEYS[1], ARGV[1], ARGV[2], 'NONSCALING')
redis.call('BF.ADD', KEYS[1], ARGV[5])
if ARGV[4] ~= '0' then redis.call('EXPIRE', KEYS[1], ARGV[4]) end
return 1
"""

# Writers that saw the lock journal their items here, one list element per item
# (its 16-byte digest, or the raw item). 0: no rebuild runs any more (add again).
JOURNAL = """
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
redis.call('RPUSH', KEYS[2], unpack(ARGV, 2))
redis.call('EXPIRE', KEYS[2], ARGV[1])
return 1
"""

# KEYS lock, journal, build, new live name, old live name; ARGV token, entries drained.
# -1 swapped; -2 lock lost; -3 build key lost; else entries still to drain.
SWAP = f"""
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return -2 end
local pending = redis.call('LLEN', KEYS[2])
if pending ~= tonumber(ARGV[2]) then return pending end
if redis.call('TYPE', KEYS[3]).ok ~= '{MODULE_TYPE}' then return -3 end
redis.call('RENAME', KEYS[3], KEYS[4])
redis.call('PERSIST', KEYS[4])
if KEYS[4] ~= KEYS[5] then redis.call('DEL', KEYS[5]) end
redis.call('DEL', KEYS[1], KEYS[2])
return -1
"""

# {"ok", the key's BF.INFO, sentinel present (0/1)}, or {the error}: "not found",
# WRONGTYPE, an unknown command. KEYS[1] key; ARGV[1] sentinel.
INFO = """
local info = redis.pcall('BF.INFO', KEYS[1])
if info.err then return {info.err} end
return {'ok', info, redis.call('BF.EXISTS', KEYS[1], ARGV[1])}
"""


def scandump(storage: Any, key: str, chunk_bytes: int) -> Iterator[tuple[int, memoryview]]:
    """RedisBloom's own dump of ``key`` (``BF.SCANDUMP``): (iterator, data) per piece of at
    most ``chunk_bytes``, a chunk's pieces at the same iterator."""
    cursor = 0
    while True:
        cursor, data = slow(storage.command)("BF.SCANDUMP", key, cursor)
        if not cursor:
            return
        view = memoryview(data)
        for at in range(0, len(view), chunk_bytes):
            yield cursor, view[at : at + chunk_bytes]


def load_chunks(storage: Any, key: str, pieces: Iterable[tuple[int, Any]], ttl: int | None) -> None:
    """``key`` made anew from ``scandump``'s pieces: ``BF.LOADCHUNK`` per chunk, in order."""
    storage.command("UNLINK", key)
    for cursor, chunk in groupby(pieces, key=itemgetter(0)):
        data = b"".join(bytes(piece) for _, piece in chunk)
        slow(storage.command)("BF.LOADCHUNK", key, cursor, data)
    if ttl:
        storage.command("EXPIRE", key, ttl)


def module_missing(alias: str, exc: BaseException | None = None) -> RedisBloomMissing:
    return RedisBloomMissing(
        f"the Redis of cache alias {alias!r} has no RedisBloom module (no BF.* commands"
        + (f": {exc}" if exc else "")
        + "). Layout 'native' needs Redis 8+, Redis Stack, or redis-server --loadmodule "
        "redisbloom.so; choose another layout (e.g. 'standard') on this server."
    )


def module_plan() -> Plan:
    """Whether the server knows every BF.* command the layout sends (``COMMAND INFO``
    answers nil for an unknown one): one round trip, no module named (Redis 8 builds it
    in; managed services may rename ``MODULE``)."""
    payload = header(2 + len(MODULE_COMMANDS), "COMMAND", "INFO", *MODULE_COMMANDS)
    return Plan(payload, 1, lambda replies: all(info is not None for info in replies[0]))


def is_unknown_command(exc: BaseException) -> bool:
    text = str(exc).lower()
    return "unknown command" in text or "unknown redis command" in text
