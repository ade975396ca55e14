"""The rotating layout: a time window of slices ("seen in the last 24 hours").

Options: ``slices`` (W, default 24) and ``slice_seconds`` (default 3600). Each
slice is a full standard bitmap sized for the row's ``capacity`` items at its
``error_rate`` -- capacity is PER SLICE. An item added is remembered for at
least W x slice_seconds and at most (W + 1) x slice_seconds; then the slice it
was written to expires by itself (a Redis key TTL). Keys, the script and the
server clock: ``engine/kinds/rotating/commands.py``.

- ``add``: writes the current slice (created on first write) and reports
  was-new against every live slice (new iff absent from all of them);
  ``contains``: present in any live slice. One script, one round trip, batches too.
- False positives: a query tests up to W + 1 slices, so the window's rate is
  about 1 - (1 - p_slice)^(live slices) -- up to (W + 1) x ``error_rate``.
  Pick ``error_rate`` for one slice accordingly (docs/rotating.md).
- Rebuild: refused (``OperationNotSupported``): a window filter has no source of
  truth to rebuild from. The local mirror: not used (reads go to Redis).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import mmh3
from django.utils.translation import gettext_lazy

from django_bloom.engine import format as fmt
from django_bloom.engine import hashing, sizing
from django_bloom.engine.kinds.base import Segment
from django_bloom.engine.kinds.rotating import commands as rotating_ops
from django_bloom.engine.kinds.standard import StandardLayout
from django_bloom.exceptions import OperationNotSupported

if TYPE_CHECKING:
    from django_bloom.engine.storage import Storage, WriteResult

DEFAULT_SLICES = 24
DEFAULT_SLICE_SECONDS = 3600
MAX_SLICES = 1000  # each operation looks at up to W + 1 slices


def _positive_int(options: Mapping[str, Any], name: str, default: int, top: int | None) -> int:
    value = options.get(name, default)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"rotating option {name!r} must be an integer, got {value!r}")
    if value < 1 or (top is not None and value > top):
        limit = f" and at most {top}" if top is not None else ""
        raise ValueError(f"rotating option {name!r} must be at least 1{limit}, got {value}")
    return value


@dataclass(frozen=True)
class RotatingLayout(StandardLayout):
    layout_name = "rotating"
    cluster_ready = False  # its scripts are not tested on Redis Cluster yet
    rebuildable = False  # no source of truth for what was seen in the window
    fixed_capacity = False  # per window: items_added counts every window
    description = gettext_lazy(
        "a time window of slices: items are forgotten after slices x slice_seconds"
    )
    supports_mirror: ClassVar[bool] = False
    expiring_keys: ClassVar[bool] = True

    slices: int = DEFAULT_SLICES
    slice_seconds: int = DEFAULT_SLICE_SECONDS

    @classmethod
    def bind(cls, segment: Segment, options: Mapping[str, Any] | None = None) -> RotatingLayout:
        """The window's keys carry a fingerprint that also names W and slice_seconds: a
        handle whose options differ from the ones the keys were made with (a row edited by
        hand) raises FilterKeyMissing instead of reading other slices than were written."""
        options = cls.validate_options(options or {})
        slices, seconds = options["slices"], options["slice_seconds"]
        text = f"{segment.fingerprint}|rotating|{slices}|{seconds}".encode()
        window_fp = mmh3.hash(text, 0, signed=False) or 1
        return cls(dataclasses.replace(segment, fingerprint=window_fp), slices, seconds)

    @classmethod
    def validate_options(cls, options: Mapping[str, Any]) -> dict[str, Any]:
        unknown = set(options) - {"slices", "slice_seconds"}
        if unknown:
            raise ValueError(
                f"layout 'rotating' takes the options 'slices' and 'slice_seconds' "
                f"(got {', '.join(sorted(unknown))})"
            )
        return {
            "slices": _positive_int(options, "slices", DEFAULT_SLICES, MAX_SLICES),
            "slice_seconds": _positive_int(options, "slice_seconds", DEFAULT_SLICE_SECONDS, None),
        }

    @property
    def window(self) -> rotating_ops.Window:
        return rotating_ops.Window(self.segment, self.slices, self.slice_seconds)

    @property
    def window_seconds(self) -> int:
        return self.slices * self.slice_seconds

    # -- the hot path: one script, the server's clock ---------------------------
    def contains(self, storage: Storage, flat: Sequence[int]) -> list[bool]:
        return rotating_ops.run_window(storage, self.window, "c", flat)

    def add(self, storage: Storage, flat: Sequence[int]) -> WriteResult:
        was_new = rotating_ops.run_window(storage, self.window, "a", flat)
        # storage.WriteResult's shape: importing storage here would make an import cycle.
        return rotating_ops.WindowWrite(was_new)  # type: ignore[return-value]

    # -- lifecycle --------------------------------------------------------------
    def create(self, storage: Storage, replace: bool = True) -> bool:
        return rotating_ops.create(storage, self.window, replace)

    def clear(self, storage: Storage) -> None:
        """Drop every slice; the control key stays (the filter exists, empty)."""
        rotating_ops.clear(storage, self.window)

    def delete(self, storage: Storage) -> None:
        rotating_ops.drop_slices(storage, self.window)
        storage.delete(self.segment)

    def count_bits(self, storage: Storage, chunk_bytes: int) -> int:
        """Bits set in the FULLEST live slice: capacity is per slice, so the stats
        (fill, estimated items, capacity used, W003) describe the slice nearest full."""
        return max(rotating_ops.slice_bits(storage, self.window).values(), default=0)

    def memory_usage(self, storage: Storage) -> int | None:
        return rotating_ops.memory_usage(storage, self.window)

    def stats_details(self, storage: Storage, chunk_bytes: int) -> dict[str, Any]:
        """The window: its length, live slices, and the false-positive rate of a query
        over all of them."""
        per_slice = rotating_ops.slice_bits(storage, self.window)
        clear = 1.0
        for bits in per_slice.values():
            clear *= 1.0 - sizing.fill_fpr(self.num_bits, bits, self.num_hashes)
        return {
            "window_seconds": self.window_seconds,
            "slice_seconds": self.slice_seconds,
            "slices": self.slices,
            "slices_live": len(per_slice),
            "window_fpr": 1.0 - clear,
            "items_in_window": sum(
                self.estimate_items(bits) for bits in per_slice.values() if bits < self.num_bits
            ),
        }

    @property
    def key_length(self) -> int:
        """Bytes at most: W + 2 slices (the current one, W before it, one expiring) and
        the control key (trailer and the slice record: a u32 per slot)."""
        slots = self.slices + 2
        return slots * self.segment.key_length + fmt.TRAILER_BYTES + 4 * slots

    # -- no rebuild, no mirror ----------------------------------------------------
    def check_rebuild(self) -> None:
        self.builder()

    def builder(self, use_numpy: bool | None = None) -> hashing.BitmapBuilder:
        raise OperationNotSupported(
            f"filter {self.name!r} is a rotating window filter: it cannot be rebuilt or "
            "resized (there is no source of truth for what was seen in the window). "
            "Create a new filter with the size you want; it fills as items arrive."
        )
