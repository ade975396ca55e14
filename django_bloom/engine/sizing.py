"""Sizing: (capacity, error rate) -> geometry, and what a fill count says.

Pure functions: no Django, no Redis. The standard layout's formulas and the
one-word layout's ("blocked" in rows: all of an item's bits in one 64-bit
word). ``engine.layouts`` chooses between them; ``hashing`` re-exports these
names (their home in earlier releases).
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import Any

LN2 = math.log(2)


def optimal_num_bits(capacity: int, error_rate: float) -> int:
    """m = ceil(-n ln p / (ln 2)^2)."""
    validate_sizing(capacity, error_rate)
    return math.ceil(-capacity * math.log(error_rate) / (LN2 * LN2))


def optimal_num_hashes(num_bits: int, capacity: int) -> int:
    """k = round(m / n * ln 2), at least 1."""
    return max(1, round(num_bits / capacity * LN2))


BLOCK_BITS = 64  # the one-word layout ("blocked" in rows): all of an item's bits in one 64-bit word
MAX_BLOCKED_HASHES = 10  # six bits of h2 choose each bit inside the word
BLOCKED_MEMORY_SLACK = 1.25  # memory the blocked layout may spend to need fewer bit writes


def blocked_fpr(num_words: int, num_items: float, num_hashes: int) -> float:
    """Expected false-positive rate of the blocked layout after ``num_items`` insertions.

    Items per word are Poisson(n / W) (Putze, Sanders & Singler 2007,
    "Cache-, hash- and space-efficient Bloom filters"). The k bits of an item
    or a probe are drawn WITH replacement from the word's 64 (six bits of h2
    each), so a probe may test fewer than k distinct bits; that raises the
    rate (~6% at k = 5) and is counted here, exactly:

        FPR = sum_i c_i * exp(lam * ((1 - i/64)^k - 1)),   lam = n / W

    where c_i comes from inclusion-exclusion over the probe's distinct bits
    (``_probe_terms``).
    """
    if num_items <= 0:
        return 0.0
    lam = num_items / num_words
    return sum(
        c * math.exp(lam * ((1.0 - i / BLOCK_BITS) ** num_hashes - 1.0))
        for i, c in enumerate(_probe_terms(num_hashes))
    )


@lru_cache(maxsize=16)
def _probe_terms(num_hashes: int) -> tuple[float, ...]:
    """c_i: P(d specific bits all set) = sum_i (-1)^i C(d, i) P(i given bits all clear),
    weighted by P(a probe has d distinct bits) = S(k, d) * 64!/(64-d)! / 64^k."""
    k, b = num_hashes, BLOCK_BITS
    distinct = [_stirling2(k, d) * math.perm(b, d) / b**k for d in range(k + 1)]
    return tuple(
        (-1) ** i * sum(distinct[d] * math.comb(d, i) for d in range(i, k + 1))
        for i in range(k + 1)
    )


def _stirling2(n: int, k: int) -> int:
    terms = sum((-1) ** i * math.comb(k, i) * (k - i) ** n for i in range(k + 1))
    return terms // math.factorial(k)


@lru_cache(maxsize=256)
def blocked_geometry(
    capacity: int, error_rate: float, slack: float = BLOCKED_MEMORY_SLACK
) -> tuple[int, int]:
    """(m, k) of the blocked layout: m a multiple of 64, meeting ``error_rate`` at capacity.

    The layout exists for speed, and an add costs Redis one bit operation per
    hash, so k is the FEWEST hashes whose filter stays within ``slack`` (default
    ``BLOCKED_MEMORY_SLACK``) of the most compact blocked filter. At p = 0.01:
    k = 3 at 1.51x the standard layout's bits (the most compact, ``slack=1``,
    is k = 5 at 1.27x but makes every add 5/3 the work).
    """
    validate_sizing(capacity, error_rate)
    sizes = {k: blocked_words(capacity, error_rate, k) for k in range(1, MAX_BLOCKED_HASHES + 1)}
    reachable = {k: words for k, words in sizes.items() if words is not None}
    if not reachable:
        raise ValueError(f"the blocked layout cannot reach error rate {error_rate}")
    limit = min(reachable.values()) * slack
    k = min(k for k, words in reachable.items() if words <= limit)
    return reachable[k] * BLOCK_BITS, k


def blocked_words(capacity: int, error_rate: float, num_hashes: int) -> int | None:
    """Fewest 64-bit words holding ``capacity`` items at ``error_rate`` with k hashes."""
    low, high = 1, max(1, optimal_num_bits(capacity, error_rate) // BLOCK_BITS)
    while blocked_fpr(high, capacity, num_hashes) > error_rate:
        low, high = high, high * 2
        if high > 1 << 40:
            return None
    while low < high:
        mid = (low + high) // 2
        if blocked_fpr(mid, capacity, num_hashes) <= error_rate:
            high = mid
        else:
            low = mid + 1
    return high


def standard_geometry(capacity: int, error_rate: float) -> tuple[int, int]:
    """(num_bits, num_hashes) of the standard layout."""
    num_bits = optimal_num_bits(capacity, error_rate)
    return num_bits, optimal_num_hashes(num_bits, capacity)


def geometry(capacity: int, error_rate: float, blocked: bool = False) -> tuple[int, int]:
    """(num_bits, num_hashes): the standard layout's, or with ``blocked`` the one-word
    layout's (the math-level name of earlier releases; the engine asks its layout class)."""
    if blocked:
        return blocked_geometry(capacity, error_rate)
    return standard_geometry(capacity, error_rate)


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
