"""The scalable layout's round trips: its ADD script calls and its contains reads.

A mixin of ``ScalableLayout`` (``layout.py``; it uses the layout's ``sub``,
``life``, ``live_count``, ``control_key``, ``_view``, ``_full`` and
``_positioners``). ``_run`` sends a batch's ADD calls (``commands.py``) for the
sub-filters this process believes live plus spares, pipelined a few per round
trip, and retries (bounded) what a growth made stale; ``_contains_trip`` reads
the live count and every known sub-filter's bits in one round trip.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from django_bloom.engine import hashing
from django_bloom.engine.kinds.base import NUMPY_MIN_ITEMS
from django_bloom.engine.kinds.scalable import commands as scalable_ops
from django_bloom.engine.segment import Segment, WriteResult
from django_bloom.engine.transport.packing import bulk, evalsha_head, header
from django_bloom.exceptions import BloomError, FilterKeyMissing

if TYPE_CHECKING:
    from django_bloom.engine.storage import Storage

MAX_POSITIONS_PER_CALL = 4096  # a batch is cut into EVALs of about this many positions
# EVALs pipelined per round trip: a few ms of server time, far below the 0.2 s socket
# timeout (a huge batch sent whole would stall the write while Redis runs the first ones).
CALLS_PER_TRIP = 4
# contains sends plain BITFIELD_RO (the standard layout's cost per bit), so it takes more
# per round trip: a 1,000-item batch over five sub-filters of k ~ 10 is one round trip.
MAX_CONTAINS_POSITIONS_PER_TRIP = 65536
ATTEMPTS = 3  # a stale view is retried; each retry learns the live count from Redis


class ScalableTrips:
    """The ADD script calls and the contains reads (mixed into ScalableLayout)."""

    def _spares(self, n: int, items: int) -> int:
        """Sub-filters beyond ``n`` whose capacities hold ``items``: the most a call of
        that many items can create (one new item per growth at least fills the rest)."""
        room, spares = 0, 0
        while room < items:
            room += self.sub_capacity(n + spares)
            spares += 1
        return max(spares, 1)

    def _payload(self, script: str, total: int, pairs: Sequence[tuple[int, int]]) -> bytes:
        subs = [self.sub(i) for i in range(total)]
        heads = self._view.setdefault("heads", {})
        head = heads.get((script, total))
        if head is None:  # the same for every call with ``total`` sub-filters
            params: list[Any] = [total]
            for i, s in enumerate(subs):
                params += [s.trailer_offset, s.num_hashes, s.fingerprint, self.sub_capacity(i)]
            keys = [self.control_key, *(s.keys.bits for s in subs)]
            head = heads[(script, total)] = evalsha_head(script, keys, params, 1)
        return head + bulk(self._positions_blob(subs, pairs))

    def _positions_blob(self, subs: Sequence[Segment], pairs: Sequence[tuple[int, int]]) -> bytes:
        """Per item, its positions in each sub-filter in turn: big-endian u32s."""
        np = hashing.numpy_module()
        if np is not None and len(pairs) >= NUMPY_MIN_ITEMS:
            digests = np.array(pairs, dtype="<u8").tobytes()
            grids = [
                hashing.standard_position_array(digests, s.num_bits, s.num_hashes).reshape(
                    len(pairs), s.num_hashes
                )
                for s in subs
            ]
            return np.concatenate(grids, axis=1).astype(">u4").tobytes()
        positions: list[int] = []
        makers = self._positioners(len(subs))
        for h1, h2 in pairs:
            for make in makers:
                positions += make(h1, h2)
        return struct.pack(f">{len(positions)}I", *positions)

    def _run(self, storage: Storage, pairs: list[tuple[int, int]], write: bool) -> list[bool]:
        script = scalable_ops.ADD
        out: list[bool | None] = [None] * len(pairs)
        todo = list(range(len(pairs)))
        n, unreplicated = self.live_count, None
        for _attempt in range(ATTEMPTS):
            wanted = n + (self._spares(n, len(todo)) if write else 0)
            total = max(n, min(wanted, self.life))  # no spare beyond the last sub-filter
            stride = self._stride(total)
            per_call = max(1, MAX_POSITIONS_PER_CALL // stride)
            chunks = [todo[i : i + per_call] for i in range(0, len(todo), per_call)]
            replies = []
            for trip in range(0, len(chunks), CALLS_PER_TRIP):
                calls = chunks[trip : trip + CALLS_PER_TRIP]
                payloads = [self._payload(script, total, [pairs[j] for j in c]) for c in calls]
                got, short = storage.run_scripts(script, payloads, write)
                replies += storage.raise_errors(got)
                unreplicated = unreplicated or short  # raised once the replies are read
            stale: list[int] = []
            for chunk, reply in zip(chunks, replies, strict=True):
                status, live = int(reply[0]), int(reply[1])
                if status == scalable_ops.MISSING_CONTROL:
                    raise self._missing(self.control_key)
                if status == scalable_ops.MISSING_SUB:
                    raise self._missing(self.sub(live).keys.bits)
                n = live  # replies come in the order Redis ran them: the last is the latest
                if status == scalable_ops.STALE:
                    if total < wanted and live <= total:  # every sub-filter given: no room
                        raise self._full()
                    stale += chunk
                    continue
                for j, flag in zip(chunk, reply[2:], strict=True):
                    out[j] = bool(flag)
            self._view["n"] = n
            if not stale:  # every reply read: now a WAIT shortfall, if any
                return WriteResult(out, False, unreplicated).reported()  # type: ignore[arg-type]
            todo = stale
        raise self._outgrown()

    def _missing(self, key: str) -> FilterKeyMissing:
        return FilterKeyMissing(
            f"Bloom filter {self.segment.name!r}: its Redis key {key!r} is missing or does not "
            "match this filter (Redis restarted without persistence, flushed or evicted). "
            "A scalable filter cannot be rebuilt: recreate it (delete, create, add again)."
        )

    def _outgrown(self) -> BloomError:
        return BloomError(
            f"scalable filter {self.segment.name!r}: it kept growing faster than this client "
            f"could follow ({ATTEMPTS} attempts); try again"
        )

    def _stride(self, count: int) -> int:
        return sum(self.sub(i).num_hashes for i in range(count))

    def _contains_trip(self, storage: Storage, pairs: list[tuple[int, int]]) -> list[bool]:
        n = self.live_count
        for _attempt in range(ATTEMPTS):
            parts = [(self.sub(j), self._sub_positions(pairs, j)) for j in range(n)]
            first = header(3, "HGET", self.control_key, "n")
            raw, found = storage.test_after(first, parts)
            if raw is None:
                raise self._missing(self.control_key)
            live = int(raw)
            self._view["n"] = live
            if live > n:
                n = live
                continue
            out = [False] * len(pairs)
            for j in range(live):  # beyond live: sub-filters a clear has removed
                got = found[j]
                if got is None:
                    raise self._missing(self.sub(j).keys.bits)
                out = [a or b for a, b in zip(out, got, strict=True)]
            return out
        raise self._outgrown()

    def _sub_positions(self, pairs: Sequence[tuple[int, int]], j: int) -> Sequence[int]:
        """Sub-filter ``j``'s positions of every item (k_j each, item by item)."""
        s = self.sub(j)
        np = hashing.numpy_module()
        if np is not None and len(pairs) >= NUMPY_MIN_ITEMS:
            digests = np.array(pairs, dtype="<u8").tobytes()
            return hashing.standard_position_array(digests, s.num_bits, s.num_hashes)
        make = self._positioners(j + 1)[j]
        return [g for h1, h2 in pairs for g in make(h1, h2)]
