"""The layout protocol: what every filter kind does, in 21 members.

A kind is a ``Layout`` subclass registered by its ``layout_name`` (engine/kinds/__init__.py);
the filter row stores the name, the registry gives the class (like ``PASSWORD_HASHERS``).
Bound to one row (``bind``) it owns:

- its geometry (``geometry``, a classmethod), the rate it gives (``expected_fpr``) and
  options (``validate_options``);
- its Redis strings: ``segment`` (the primary one), ``segments`` (all of them), ``control``
  (whose keys hold the counters, the rebuild lock and the journal), ``key_bytes``;
- an item's bit positions: ``positioner()`` (one item), ``position_array`` (numpy) and
  ``positions`` (a batch);
- single items and batches: ``contains`` / ``add`` on flat positions, ``contains_batch`` /
  ``add_batch`` on a streamed ``Batch``;
- its lifecycle: ``create``, ``clear``, ``delete``; and ``measure`` (stats).

What only some kinds do is a capability they opt into (engine/kinds/capabilities.py):
``Removable``, ``Rebuildable``, ``Mirrorable``, ``Planned``, ``FamilyTemplate``,
``ClusterReady``, ``ExpiringKeys``, ``Splittable``. Callers ask ``isinstance(layout, X)``.

Storage knows segments (engine/segment.py), never kinds.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from django_bloom.engine import hashing, sizing
from django_bloom.engine.segment import Segment, WriteResult

if TYPE_CHECKING:
    from django_bloom.engine.batches import Batch
    from django_bloom.engine.storage import Storage

NUMPY_MIN_ITEMS = 8  # smaller batches are cheaper in plain Python than through numpy


@dataclass(frozen=True)
class RowParams:
    """What a filter row gives its kind beside the primary segment (``Layout.bind``)."""

    options: Mapping[str, Any] = field(default_factory=dict)
    capacity: int = 0
    error_rate: float = 0.0


NO_PARAMS = RowParams()


class OptionTypeError(TypeError, ValueError):
    """A layout option of the wrong type: a ``TypeError``, and a ``ValueError`` like
    every other refused option (callers catching either see it)."""


def check_options_shape(options: Any) -> dict[str, Any]:
    """``options`` as a dict, or ``OptionTypeError`` before any kind reads or prints them:
    at most 20 names (short texts), each with one number (64 bits at most), truth value or
    short text. Nothing nested: options nested 100,000 deep are refused as any list is.
    Every entry checks them (``create_filter``, the admin's add form)."""
    if not isinstance(options, Mapping) or len(options) > 20:
        raise OptionTypeError("layout options map at most 20 option names to their values")
    for name, value in options.items():
        text = isinstance(value, str) and len(value) <= 200
        number = isinstance(value, float) or (isinstance(value, int) and value.bit_length() <= 64)
        if not (isinstance(name, str) and len(name) <= 100 and (text or number)):
            raise OptionTypeError(
                "a layout option is a name with one number (64 bits at most), true/false or "
                "a short text"
            )
    return dict(options)


def check_option_names(layout: str, options: Mapping[str, Any], names: Sequence[str]) -> None:
    """ValueError naming the options ``layout`` takes when ``options`` has any other."""
    unknown = set(options) - set(names)
    if not unknown:
        return
    takes = " and ".join(repr(name) for name in names) if names else "no options"
    raise ValueError(f"layout {layout!r} takes {takes} (got {', '.join(sorted(unknown))})")


def int_option(
    layout: str, options: Mapping[str, Any], name: str, default: int, top: int | None = None
) -> int:
    """Option ``name`` (``default`` when absent): an integer from 1 to ``top``."""
    value = options.get(name, default)
    if isinstance(value, bool) or not isinstance(value, int):
        raise OptionTypeError(f"{layout} option {name!r} must be an integer, got {value!r}")
    if value < 1 or (top is not None and value > top):
        limit = f" and at most {top}" if top is not None else ""
        raise ValueError(f"{layout} option {name!r} must be at least 1{limit}, got {value}")
    return value


@dataclass(frozen=True)
class Measure:
    """What ``Layout.measure`` reads from Redis for ``Filter.stats()``."""

    bits_set: int
    estimated_items: float
    fill_fpr: float
    memory_bytes: int | None
    # Bits of Redis memory per position: 1, or 4 for 4-bit counters.
    bits_per_position: int = 1
    # Kind-specific figures (a rotating filter's window, a scalable filter's sub-filters);
    # "num_bits" and "capacity" entries replace the row's (a grown filter holds more).
    details: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Layout:
    """A kind bound to one filter's geometry. Subclasses set ``layout_name`` (the value
    stored in the filter row) and the position functions; the defaults below are the
    bit-per-hash scheme on one segment."""

    layout_name: ClassVar[str] = ""
    # A one-line description for the admin's and ``bloom create``'s choices.
    description: ClassVar[str] = ""
    segment: Segment

    # -- what a row fixes -------------------------------------------------------
    @classmethod
    def validate_options(cls, options: Mapping[str, Any]) -> dict[str, Any]:
        """The options a row may store, checked (ValueError) and with defaults filled in.
        Called by ``create_filter`` before anything is written."""
        check_option_names(cls.layout_name, options, ())
        return {}

    @classmethod
    def geometry(
        cls, capacity: int, error_rate: float, options: Mapping[str, Any] | None = None
    ) -> tuple[int, int]:
        """The row's (num_bits, num_hashes): its primary segment's geometry."""
        raise NotImplementedError

    @classmethod
    def expected_fpr(cls, num_bits: int, num_items: float, num_hashes: int) -> float:
        """The false-positive rate ``num_items`` distinct items give a row of this geometry
        (at the row's capacity, at most the error rate ``geometry`` sized it for): the past-
        capacity warning's figure. Here k bits anywhere: (1 - e^(-kn/m))^k."""
        return sizing.expected_fpr(num_bits, num_items, num_hashes)

    @classmethod
    def bind(cls, segment: Segment, row: RowParams = NO_PARAMS) -> Layout:
        """This kind for one row: its primary segment and what else the row fixes (its
        options; for kinds that size more than the primary segment, capacity and
        error rate)."""
        return cls(segment)

    # -- its Redis strings ------------------------------------------------------
    @property
    def segments(self) -> tuple[Segment, ...]:
        return (self.segment,)

    @property
    def control(self) -> Segment:
        """The segment whose keys hold the counters, rebuild lock and journal."""
        return self.segment

    @property
    def key_bytes(self) -> int:
        """Bytes the filter's Redis key(s) hold at full size: bitmaps and trailers."""
        return sum(s.key_length for s in self.segments)

    # -- positions ----------------------------------------------------------------
    def positioner(self) -> Callable[[int, int], list[int]]:
        """``f(h1, h2) -> [g_0 .. g_{k-1}]``."""
        raise NotImplementedError

    def position_array(self, digests: bytes) -> Any:
        """numpy: the positions of ``item_digests`` output as one uint64 array."""
        raise NotImplementedError

    def positions(self, digests: bytes) -> Sequence[int]:
        """Flat positions of a batch (a numpy array when numpy is installed and it pays)."""
        if hashing.numpy_module() is not None and len(digests) >= 16 * NUMPY_MIN_ITEMS:
            return self.position_array(digests)
        return hashing.positions_of(hashing.pairs_of(digests), self.positioner())

    # -- single items and batches -------------------------------------------------
    def contains(self, storage: Storage, flat: Sequence[int]) -> list[bool]:
        """Per item (k positions each): are all its bits set in Redis?"""
        return storage.test(self.segment, flat)

    def add(self, storage: Storage, flat: Sequence[int]) -> WriteResult:
        """Set every item's bits; per item, whether any was clear."""
        return storage.set(self.segment, flat)

    # A kind whose ``contains``/``add`` is the one-segment default streams a large batch:
    # storage sends each chunk of ``batch.chunks()`` before the next is hashed, so Redis
    # works while Python hashes (one round trip still). A kind with its own
    # ``contains``/``add`` gets ``batch.whole()``: one call, as if the batch came whole.
    def contains_batch(self, storage: Storage, batch: Batch) -> list[bool]:
        if type(self).contains is Layout.contains:
            return storage.test_chunks(self.segment, batch.chunks())
        return self.contains(storage, batch.whole())

    def add_batch(self, storage: Storage, batch: Batch) -> WriteResult:
        if type(self).add is Layout.add:
            return storage.set_chunks(self.segment, batch.chunks())
        return self.add(storage, batch.whole())

    # -- lifecycle: the handle runs these, never commands on segments itself ---------
    # The defaults run the one-segment commands on every segment (one, or a sharded
    # filter's S).
    def create(self, storage: Storage, replace: bool = True) -> bool:
        """Make the key(s) at full size (``replace``: over whatever is there)."""
        made = [storage.create(s, replace=replace) for s in self.segments]
        return all(made)

    def clear(self, storage: Storage) -> None:
        """Empty the filter; its key(s) stay at full size."""
        for s in self.segments:
            storage.clear(s)

    def delete(self, storage: Storage) -> None:
        """Delete every key of the filter, every generation included."""
        for s in self.segments:
            storage.delete(s)

    def measure(self, storage: Storage, chunk_bytes: int) -> Measure:
        """Bits set, what they say (estimated items, false-positive rate), memory."""
        return measure_segments(storage, self.segments, chunk_bytes)


def measure_segments(storage: Storage, segments: Sequence[Segment], chunk_bytes: int) -> Measure:
    """The measure of bit-per-hash segments that make one filter (k bits in one of them)."""
    bits = sum(storage.count_bits(s, chunk_bytes) for s in segments)
    sizes = [storage.memory_usage(s) for s in segments]
    m, k = sum(s.num_bits for s in segments), segments[0].num_hashes
    return Measure(
        bits_set=bits,
        estimated_items=sizing.estimate_items(m, k, bits),
        fill_fpr=sizing.fill_fpr(m, bits, k),
        memory_bytes=None if None in sizes else sum(sizes),
    )
