"""A kind's layout over a segment of a given geometry, for tests of positions and bitmaps
that need no Redis key: the same positioner, numpy path and prober a filter uses."""

from django_bloom.engine import hashing
from django_bloom.engine.kinds import layout_class
from django_bloom.engine.segment import Segment


def bare_layout(kind: str, num_bits: int, num_hashes: int):
    """``kind``'s layout (``"standard"``, ``"blocked"``, ...) bound to an m-bit, k-hash segment."""
    return layout_class(kind).bind(Segment("bare", "default", "bare", num_bits, num_hashes, 0))


def layout_bitmap(layout, digests: bytes, use_numpy: bool | None = None) -> bytes:
    """The bitmap ``digests`` (``item_digests`` output) set, built as a rebuild builds it
    (``Rebuildable.builder``), with numpy or (``use_numpy=False``) without."""
    builder = hashing.BitmapBuilder(
        layout.segment.num_bits, layout.positioner(), layout.position_array, use_numpy
    )
    builder.add(digests)
    return bytes(builder.tobytes())
