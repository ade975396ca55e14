"""The rotating layout: a time window of slices ("seen in the last 24 hours").

Options: ``slices`` (W, default 24) and ``slice_seconds`` (default 3600). Each
slice is a full standard bitmap sized for the row's ``capacity`` items at its
``error_rate`` -- capacity is PER SLICE. An item added is remembered for at
least W x slice_seconds and at most (W + 1) x slice_seconds; then the window steps past
the slice it was written to (when the server's and the caller's clocks agree) and the
slice is deleted. Keys: ``commands.py``; the script and the clocks: ``scripts.py`` (both
in ``engine/kinds/rotating/``).

- ``add``: writes the current slice (created on first write) and reports
  was-new against every live slice (new iff absent from all of them);
  ``contains``: present in any live slice. One script, one round trip, batches too.
- False positives: a query tests up to W + 1 slices, so the window's rate is
  about 1 - (1 - p_slice)^(live slices) -- up to (W + 1) x ``error_rate``.
  Pick ``error_rate`` for one slice accordingly (docs/rotating.md).
- Not ``Rebuildable`` (a rebuild is refused: a window filter has no source of truth to
  rebuild from), not ``Mirrorable`` (reads go to Redis).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import mmh3
from django.utils.translation import gettext_lazy

from django_bloom.engine import format as fmt
from django_bloom.engine import sizing
from django_bloom.engine.kinds import base
from django_bloom.engine.kinds.base import NO_PARAMS, Measure, RowParams
from django_bloom.engine.kinds.capabilities import ExpiringKeys
from django_bloom.engine.kinds.rotating import commands as rotating_ops
from django_bloom.engine.kinds.standard import Bitmap
from django_bloom.engine.segment import Segment, WriteResult

if TYPE_CHECKING:
    from django_bloom.engine.storage import Storage

DEFAULT_SLICES = 24
DEFAULT_SLICE_SECONDS = 3600
MAX_SLICES = 1000  # each operation looks at up to W + 1 slices
# A slice expires (EXPIREAT, in the script) (slices + 2) x slice_seconds after the
# server's clock at most; Lua's numbers are exact and Redis takes the time up to 2**53 s,
# with the clock below 2**32 s (the u32 epochs, year 2106).
MAX_EXPIRY_SPAN = 2**53 - 2**32


@dataclass(frozen=True)
class RotatingLayout(Bitmap, ExpiringKeys):
    """Not Rebuildable (no source of truth for what was seen in the window), not
    Mirrorable (reads go to Redis), not ClusterReady (its scripts are not tested there)."""

    layout_name = "rotating"
    description = gettext_lazy(
        "a time window of slices: items are forgotten after slices x slice_seconds"
    )
    rebuild_refusal = (
        "filter {name!r} is a rotating window filter: it cannot be rebuilt or resized (there "
        "is no source of truth for what was seen in the window). Create a new filter with "
        "the size you want; it fills as items arrive."
    )
    transfer_refusal = (
        "filter {name!r} is a rotating window: it is not exported or imported (its slices "
        "are keys named for their time slice that expire by the clock of the Redis that made "
        "them, which a dump does not carry). Create the window on the new Redis and write to "
        "both for one window's length, then switch."
    )

    slices: int = DEFAULT_SLICES
    slice_seconds: int = DEFAULT_SLICE_SECONDS

    @classmethod
    def bind(cls, segment: Segment, row: RowParams = NO_PARAMS) -> RotatingLayout:
        """The window's keys carry a fingerprint that also names W and slice_seconds: a
        handle whose options differ from the ones the keys were made with (a row edited by
        hand) raises FilterKeyMissing instead of reading other slices than were written."""
        options = cls._checked(row.options)  # not the span: a stored row stays readable
        slices, seconds = options["slices"], options["slice_seconds"]
        text = f"{segment.fingerprint}|rotating|{slices}|{seconds}".encode()
        window_fp = mmh3.hash(text, 0, signed=False) or 1
        return cls(dataclasses.replace(segment, fingerprint=window_fp), slices, seconds)

    @classmethod
    def validate_options(cls, options: Mapping[str, Any]) -> dict[str, Any]:
        """Also over the filter's life: every slice's expiry a time Redis accepts."""
        checked = cls._checked(options)
        top = MAX_EXPIRY_SPAN // (checked["slices"] + 2)
        if checked["slice_seconds"] > top:
            raise ValueError(
                f"rotating option 'slice_seconds' must be at most {top} with "
                f"{checked['slices']} slices, got {checked['slice_seconds']}: a slice expires "
                "(slices + 2) x slice_seconds after the server's clock, and Redis takes "
                "expiry times up to 2**53 s"
            )
        return checked

    @classmethod
    def _checked(cls, options: Mapping[str, Any]) -> dict[str, Any]:
        base.check_option_names("rotating", options, ("slices", "slice_seconds"))
        return {
            "slices": base.int_option("rotating", options, "slices", DEFAULT_SLICES, MAX_SLICES),
            "slice_seconds": base.int_option(
                "rotating", options, "slice_seconds", DEFAULT_SLICE_SECONDS
            ),
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
        return WriteResult(rotating_ops.run_window(storage, self.window, "a", flat), False)

    # -- lifecycle --------------------------------------------------------------
    def create(self, storage: Storage, replace: bool = True) -> bool:
        return rotating_ops.create(storage, self.window, replace)

    def clear(self, storage: Storage) -> None:
        """Drop every slice; the control key stays (the filter exists, empty)."""
        rotating_ops.clear(storage, self.window)

    def delete(self, storage: Storage) -> None:
        rotating_ops.drop_slices(storage, self.window)
        storage.delete(self.segment)

    def measure(self, storage: Storage, chunk_bytes: int) -> Measure:
        """Bits set in the FULLEST live slice: capacity is per slice, so the stats (fill,
        estimated items, capacity used, W003) describe the slice nearest full. The details
        give the window: its length, live slices, and the false-positive rate of a query
        over all of them."""
        per_slice = rotating_ops.slice_bits(storage, self.window)
        m, k = self.segment.num_bits, self.segment.num_hashes
        clear = 1.0
        for bits in per_slice.values():
            clear *= 1.0 - sizing.fill_fpr(m, bits, k)
        fullest = max(per_slice.values(), default=0)
        return Measure(
            bits_set=fullest,
            estimated_items=sizing.estimate_items(m, k, fullest),
            fill_fpr=sizing.fill_fpr(m, fullest, k),
            memory_bytes=rotating_ops.memory_usage(storage, self.window),
            details={
                "window_seconds": self.window_seconds,
                "slice_seconds": self.slice_seconds,
                "slices": self.slices,
                "slices_live": len(per_slice),
                "window_fpr": 1.0 - clear,
                "items_in_window": sum(
                    sizing.estimate_items(m, k, bits) for bits in per_slice.values() if bits < m
                ),
            },
        )

    @property
    def key_bytes(self) -> int:
        """Bytes at most: W + 2 slices (the current one, W before it, one expiring) and
        the control key (trailer and the slice record: a u32 per slot)."""
        slots = self.slices + 2
        return slots * self.segment.key_length + fmt.TRAILER_BYTES + 4 * slots
