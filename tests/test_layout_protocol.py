"""The layout protocol's lifecycle seams: options are checked before anything is written,
a row's layout must name a registered layout, and removal is refused by one-bit layouts."""

import pytest
from django.core.exceptions import ValidationError

import django_bloom
from django_bloom.admin import BloomFilterCreateForm
from django_bloom.exceptions import OperationNotSupported
from django_bloom.models import BloomFilter

pytestmark = pytest.mark.django_db


def test_options_a_layout_does_not_take_are_refused_and_nothing_is_written(
    redis_client, bloom_prefix
):
    with pytest.raises(ValueError, match="takes no options"):
        django_bloom.create_filter("opts", capacity=100, options={"growth": 2})
    assert not BloomFilter.objects.filter(name="opts").exists()
    assert not redis_client.keys(f"{bloom_prefix}:*opts*")


def test_a_row_layout_must_name_a_registered_layout():
    row = BloomFilter(name="x", capacity=10, error_rate=0.01, num_bits=96, num_hashes=7)
    row.layout = "no-such-layout"
    with pytest.raises(ValidationError, match="unknown layout"):
        row.full_clean()


def test_remove_on_a_plain_filter_is_refused_and_the_item_stays(bloom_prefix):
    f = django_bloom.create_filter("plain", capacity=100)
    f.add("a")
    with pytest.raises(OperationNotSupported, match="counting"):
        f.remove("a")
    assert f.contains("a")


def test_admin_offers_every_registered_layout_with_its_description():
    choices = dict(BloomFilterCreateForm().fields["layout"].choices)
    assert set(choices) >= {"standard", "blocked"}
    assert "one 64-bit word" in choices["blocked"]


@pytest.mark.parametrize("layout", ["scalable", "rotating"])
@pytest.mark.parametrize(
    "binding", [{"source": "auth.User.email"}, {"kind": "blocklist"}], ids=["source", "blocklist"]
)
def test_a_layout_that_cannot_be_rebuilt_is_never_bound(
    layout, binding, redis_client, bloom_prefix
):
    """A bound filter must be rebuildable: after a lost key, a rebuild is its way back."""
    with pytest.raises(ValueError, match="cannot be rebuilt"):
        django_bloom.create_filter("bound", capacity=100, layout=layout, **binding)
    assert not BloomFilter.objects.filter(name="bound").exists()
    assert not redis_client.keys(f"{bloom_prefix}:*bound*")


@pytest.mark.parametrize("layout", ["standard", "blocked", "counting"])
def test_rebuildable_layouts_can_be_bound(layout, bloom_prefix):
    f = django_bloom.create_filter("bound", capacity=100, layout=layout, source="auth.User.email")
    assert f.meta.is_bound
