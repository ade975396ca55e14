"""Sizing: (capacity, error rate) -> geometry, and what a fill count says.

Pure functions: no Django, no Redis. The formulas of k bits anywhere in a bitmap
(the standard layout's, which the counting, sharded, scalable and rotating kinds
share) and the bounds every kind checks. A kind that sizes itself otherwise keeps
its formulas in its own module (the one-word layout: ``engine/kinds/blocked.py``).
"""

from __future__ import annotations

import math
from typing import Any

LN2 = math.log(2)


def optimal_num_bits(capacity: int, error_rate: float) -> int:
    """m = ceil(-n ln p / (ln 2)^2)."""
    validate_sizing(capacity, error_rate)
    return math.ceil(-capacity * math.log(error_rate) / (LN2 * LN2))


def optimal_num_hashes(num_bits: int, capacity: int) -> int:
    """k = round(m / n * ln 2), at least 1."""
    return max(1, round(num_bits / capacity * LN2))


def standard_geometry(capacity: int, error_rate: float) -> tuple[int, int]:
    """(num_bits, num_hashes) of the standard layout."""
    num_bits = optimal_num_bits(capacity, error_rate)
    return num_bits, optimal_num_hashes(num_bits, capacity)


# One sizing rule for the API, the commands and the model fields (their validators
# use these bounds): capacity fits a PositiveBigIntegerField, and the error rate's
# range keeps k = ceil(log2(1/p)) at most MAX_HASHES.
MAX_CAPACITY = 2**63 - 1
MIN_ERROR_RATE = 1e-12
MAX_ERROR_RATE = 1 - 1e-12
MAX_HASHES = 40


def validate_sizing(capacity: Any, error_rate: Any) -> None:
    if isinstance(capacity, bool) or not isinstance(capacity, int):
        raise TypeError(f"capacity must be an int, got {type(capacity).__name__}")
    if not 1 <= capacity <= MAX_CAPACITY:
        raise ValueError(f"capacity must lie between 1 and 2**63-1, got {capacity}")
    if isinstance(error_rate, bool) or not isinstance(error_rate, (int, float)):
        raise TypeError(f"error_rate must be a float, got {type(error_rate).__name__}")
    if not MIN_ERROR_RATE <= error_rate <= MAX_ERROR_RATE:  # NaN fails too
        raise ValueError(
            f"error_rate must lie between {MIN_ERROR_RATE:g} and 1 - {1 - MAX_ERROR_RATE:.0e}, "
            f"got {error_rate}"
        )


def expected_fpr(num_bits: int, num_items: float, num_hashes: int) -> float:
    """False-positive rate expected after ``num_items`` insertions: (1 - e^(-kn/m))^k."""
    if num_items <= 0:
        return 0.0
    return (1.0 - math.exp(-num_hashes * num_items / num_bits)) ** num_hashes


def estimate_items(num_bits: int, num_hashes: int, bits_set: int) -> float:
    """Swamidass & Baldi estimate of distinct items from set bits: -(m/k) ln(1 - X/m)."""
    if bits_set >= num_bits:
        return math.inf
    return -(num_bits / num_hashes) * math.log1p(-bits_set / num_bits)


def fill_fpr(num_bits: int, bits_set: int, num_hashes: int) -> float:
    """Current false-positive rate from the fill ratio: (X/m)^k."""
    return (bits_set / num_bits) ** num_hashes


# -- sharded filters: bits split over segments (layouts/sharded.py) -----------------
SEGMENT_ALIGN_BITS = 64


def segment_bits(num_bits: int, segments: int) -> int:
    """Bits per segment: an even split of ``num_bits``, rounded up to whole 64-bit words."""
    each = -(-num_bits // segments)
    return -(-each // SEGMENT_ALIGN_BITS) * SEGMENT_ALIGN_BITS


def segments_needed(num_bits: int, max_segment_bytes: int) -> int:
    """The fewest segments whose bitmaps each fit ``max_segment_bytes``."""
    count = max(1, -(-((num_bits + 7) // 8) // max_segment_bytes))
    while segment_bits(num_bits, count) // 8 > max_segment_bytes:
        count += 1
    return count
