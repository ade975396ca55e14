"""One sizing rule for the API, the admin and the model (issue 11, smaller items)."""

import pytest
from django.core.exceptions import ValidationError

import django_bloom
from django_bloom.engine import sizing
from django_bloom.engine.kinds.blocked import blocked_geometry
from django_bloom.models import BloomFilter

pytestmark = pytest.mark.django_db


def nothing_written(redis_client, prefix):
    return not BloomFilter.objects.exists() and not list(redis_client.scan_iter(f"{prefix}:*"))


@pytest.mark.parametrize(
    "capacity, error_rate, words",
    [
        (2**63, 0.5, "capacity"),
        (2**64, 0.01, "capacity"),
        (10, 0.9999999999999999, "error_rate"),
        (10, 1e-300, "error_rate"),
        (10, 1e-13, "error_rate"),
        (2**63, 0.9999999999999999, "capacity"),
    ],
)
def test_out_of_range_sizing_is_a_clear_value_error_and_writes_nothing(
    capacity, error_rate, words, redis_client, bloom_prefix
):
    with pytest.raises(ValueError) as info:
        django_bloom.create_filter("big", capacity=capacity, error_rate=error_rate)
    assert words in str(info.value)
    assert nothing_written(redis_client, bloom_prefix)


def model_accepts(capacity, error_rate):
    row = BloomFilter(name="m", capacity=capacity, error_rate=error_rate)
    try:
        row.full_clean(exclude=["num_bits", "num_hashes"])
    except ValidationError:
        return False
    return True


def api_accepts(capacity, error_rate):
    try:
        sizing.validate_sizing(capacity, error_rate)
    except ValueError:
        return False
    return True


@pytest.mark.parametrize(
    "capacity, error_rate",
    [
        (1, sizing.MIN_ERROR_RATE),
        (1, sizing.MAX_ERROR_RATE),
        (1, sizing.MIN_ERROR_RATE * 0.999),
        (1, 0.9999999999999999),
        (1, 1e-300),
        (sizing.MAX_CAPACITY, 0.5),
        (sizing.MAX_CAPACITY + 1, 0.5),
        (0, 0.5),
    ],
)
def test_the_model_and_the_api_apply_the_same_bounds(capacity, error_rate):
    assert model_accepts(capacity, error_rate) == api_accepts(capacity, error_rate)


def test_the_lowest_error_rate_keeps_k_small():
    _bits, k = sizing.standard_geometry(1000, sizing.MIN_ERROR_RATE)
    assert k <= sizing.MAX_HASHES == 40
    _bits, k = blocked_geometry(1000, sizing.MIN_ERROR_RATE)
    assert k <= sizing.MAX_HASHES
