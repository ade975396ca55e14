"""Options checked against the filter's whole life at create time (issue 23, item 6).

A scalable filter's last sub-filter must still have a sizeable error rate; a rotating
filter's slices must expire at a time Redis accepts. Refused by ``create_filter``, the
admin's add form and ``bloom create`` alike, with a message naming the option and its
bound, and nothing written. At a real limit (64 sub-filters, one Redis string) an add
raises ``FilterFull`` (a ``BloomError``), never a ``ValueError``.
"""

from __future__ import annotations

import json
import re

import pytest
from django.core.management import CommandError, call_command
from django.urls import reverse

import django_bloom
from django_bloom import services
from django_bloom.engine.kinds.scalable.limits import MAX_SUB_FILTERS
from django_bloom.exceptions import BloomError, FilterFull
from django_bloom.models import BloomFilter

pytestmark = pytest.mark.django_db

REFUSED = [
    pytest.param("scalable", {"tightening": 1e-7}, "'tightening'", id="tightening-1e-7"),
    pytest.param("scalable", {"tightening": 1e-200}, "'tightening'", id="tightening-1e-200"),
    pytest.param("rotating", {"slice_seconds": 10**16}, "'slice_seconds'", id="slice_seconds-1e16"),
    pytest.param(
        "rotating",
        {"slices": 1000, "slice_seconds": 9 * 10**12},
        "'slice_seconds'",
        id="slices-x-slice_seconds",
    ),
]


def _nothing_written(redis_client, prefix, name):
    assert not BloomFilter.objects.filter(name=name).exists()
    assert list(redis_client.scan_iter(match=f"{prefix}:*")) == []


@pytest.mark.parametrize("layout, options, option", REFUSED)
def test_create_filter_refuses_options_that_break_a_later_add(
    layout, options, option, redis_client, bloom_prefix
):
    with pytest.raises(ValueError, match=option) as refused:
        django_bloom.create_filter("doomed", capacity=1000, layout=layout, options=options)
    assert "at least" in str(refused.value) or "at most" in str(refused.value)  # its bound
    _nothing_written(redis_client, bloom_prefix, "doomed")


@pytest.mark.parametrize("layout, options, option", REFUSED)
def test_the_admin_add_form_refuses_them(
    layout, options, option, admin_client, redis_client, bloom_prefix
):
    resp = admin_client.post(
        reverse("admin:django_bloom_bloomfilter_add"),
        {
            "name": "doomed",
            "description": "",
            "kind": "generic",
            "capacity": "1000",
            "error_rate": "0.01",
            "layout": layout,
            "layout_options": json.dumps(options),
            "cache_alias": "default",
            "source": "",
            "normalizer": "",
            "encoder": "",
        },
    )
    assert resp.status_code == 200  # the form again, with the error
    assert option in resp.content.decode().replace("&#x27;", "'")
    _nothing_written(redis_client, bloom_prefix, "doomed")


@pytest.mark.parametrize("layout, options, option", REFUSED)
def test_bloom_create_refuses_them(layout, options, option, redis_client, bloom_prefix):
    flags = [f"--option={key}={value}" for key, value in options.items()]
    with pytest.raises(CommandError, match=option):
        call_command(
            "bloom", "create", "doomed", "--capacity", "1000", "--layout", layout, *flags,
            verbosity=0,
        )  # fmt: skip
    _nothing_written(redis_client, bloom_prefix, "doomed")


def test_the_default_tightening_is_refused_where_the_64th_sub_filter_is_unsizeable(
    redis_client, bloom_prefix
):
    """capacity 50, p 1e-9, growth 1: sub-filter 31 would need a rate below 1e-12. The
    message gives the tightening's bounds; a tightening inside them is accepted."""
    bounds = r"'tightening' must be at least (0\.\d+) and at most (0\.\d+)"
    with pytest.raises(ValueError, match=bounds) as no:
        django_bloom.create_filter(
            "tiny", capacity=50, error_rate=1e-9, layout="scalable", options={"growth": 1}
        )
    _nothing_written(redis_client, bloom_prefix, "tiny")
    low, high = map(float, re.search(bounds, str(no.value)).groups())
    assert low < high
    for end, tightening in enumerate((low, high)):
        django_bloom.create_filter(
            f"tiny-{end}", capacity=50, error_rate=1e-9, layout="scalable",
            options={"growth": 1, "tightening": tightening},
        )  # fmt: skip


@pytest.mark.slow
def test_a_scalable_filter_grows_to_64_sub_filters_then_says_full(bloom_prefix):
    f = django_bloom.create_filter(
        "tiny", capacity=50, error_rate=1e-9, layout="scalable",
        options={"growth": 1, "tightening": 0.97},
    )  # fmt: skip
    added = 0
    with pytest.raises(FilterFull, match="full"):
        for start in range(0, 100 * 50, 25):
            f.add_many([f"item-{i}" for i in range(start, start + 25)])
            added += 25
    assert f.stats().details["sub_filters"] == MAX_SUB_FILTERS
    assert added > (MAX_SUB_FILTERS - 1) * 50  # the last one was used, not only announced
    assert all(f.contains_many([f"item-{i}" for i in range(added)]))  # nothing lost
    with pytest.raises(FilterFull):
        f.add("one more")
    assert issubclass(FilterFull, BloomError) and not issubclass(FilterFull, ValueError)


def test_a_row_made_before_the_check_raises_full_not_value_error(bloom_prefix):
    """A row whose options were stored before create checked them: its adds fill what
    can be sized, then raise FilterFull (a BloomError), never a ValueError."""
    f = django_bloom.create_filter(
        "legacy", capacity=50, error_rate=0.01, layout="scalable", options={"growth": 1}
    )
    BloomFilter.objects.filter(pk=f.meta.pk).update(options={"growth": 1, "tightening": 1e-7})
    services.forget_filters()
    f = django_bloom.get_filter("legacy")
    with pytest.raises(FilterFull):
        for i in range(0, 1000, 10):
            f.add_many([f"x-{j}" for j in range(i, i + 10)])
    assert f.stats().details["sub_filters"] == 2  # sub-filter 2's rate is 1e-16: unsizeable
