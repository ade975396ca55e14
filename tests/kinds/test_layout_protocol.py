"""The layout protocol's seams outside the contract (tests/contract/): each kind's options
refused alike, a row's layout must name a registered layout, the admin's layout choices
and options."""

import pytest
from django.core.exceptions import ValidationError

import django_bloom
from django_bloom.admin.forms import BloomFilterCreateForm
from django_bloom.models import BloomFilter

pytestmark = pytest.mark.django_db


# Every kind with options: an unknown name, a wrong type and an out-of-range value.
OPTION_MISTAKES = [
    ("sharded", "segments", "4", 0),
    ("scalable", "growth", 1.5, 17),
    ("rotating", "slices", "24", 0),
    ("native", "raw_items", "yes", None),
]


@pytest.mark.parametrize("layout, option, wrong_type, out_of_range", OPTION_MISTAKES)
def test_every_kind_refuses_bad_options_alike(
    layout, option, wrong_type, out_of_range, redis_client, bloom_prefix
):
    from django_bloom.engine.kinds import layout_class

    check = layout_class(layout).validate_options
    with pytest.raises(ValueError, match=rf"layout '{layout}' takes .*'{option}'.*\(got typo\)"):
        check({"typo": 1})
    for error in (TypeError, ValueError):  # a wrong type is both (callers catch either)
        with pytest.raises(error, match=rf"{layout} option '{option}' must be"):
            check({option: wrong_type})
    if out_of_range is not None:
        with pytest.raises(ValueError, match=rf"{layout} option '{option}' must be at least 1"):
            check({option: out_of_range})
    assert not redis_client.keys(f"{bloom_prefix}:*")


def test_a_row_layout_must_name_a_registered_layout():
    row = BloomFilter(name="x", capacity=10, error_rate=0.01, num_bits=96, num_hashes=7)
    row.layout = "no-such-layout"
    with pytest.raises(ValidationError, match="unknown layout"):
        row.full_clean()


def test_admin_offers_every_registered_layout_with_its_description():
    choices = dict(BloomFilterCreateForm().fields["layout"].choices)
    assert set(choices) >= {"standard", "blocked"}
    assert "one 64-bit word" in choices["blocked"]


@pytest.mark.django_db(transaction=True)  # the async ORM reads the row from another thread
def test_a_family_member_answers_through_the_async_api(bloom_prefix):
    import asyncio

    django_bloom.create_filter("pushed", capacity=100, family=True, member_ttl=60)

    async def scenario():
        member = await django_bloom.aget_filter("pushed", member=42)
        assert await member.aadd("article-1") is True
        other = await django_bloom.aget_filter("pushed", member=43)
        return await member.acontains("article-1"), await other.acontains("article-1")

    assert asyncio.run(scenario()) == (True, False)


def test_a_family_is_refused_on_a_redis_cluster(settings):
    """Refused before any I/O (the cluster named here does not even run); the kinds that
    are not ClusterReady are refused there too (tests/contract/)."""
    settings.DJANGO_BLOOM = {**settings.DJANGO_BLOOM, "CLUSTERS": {"ring": "redis://127.0.0.1:1"}}
    with pytest.raises(ValueError, match="Redis Cluster"):
        django_bloom.create_filter("on-ring", capacity=100, cache_alias="ring", family=True)
    assert not BloomFilter.objects.filter(name="on-ring").exists()


def test_the_change_page_shows_a_layouts_options(admin_client, bloom_prefix):
    f = django_bloom.create_filter(
        "windowed", capacity=100, layout="rotating", options={"slices": 3, "slice_seconds": 60}
    )
    page = admin_client.get(f"/admin/django_bloom/bloomfilter/{f.meta.pk}/change/").content
    assert b"slice_seconds=60, slices=3" in page


def admin_add(admin_client, **fields):
    from django.urls import reverse

    from tests.admin.test_admin import filter_form

    return admin_client.post(reverse("admin:django_bloom_bloomfilter_add"), filter_form(**fields))


def test_the_admin_add_form_sets_a_layouts_options(admin_client, bloom_prefix):
    resp = admin_add(
        admin_client, layout="rotating", layout_options='{"slices": 6, "slice_seconds": 600}'
    )
    assert resp.status_code == 302, resp.content.decode()[:2000]
    assert django_bloom.get_filter("via-admin").meta.options == {"slices": 6, "slice_seconds": 600}


@pytest.mark.parametrize(
    "fields, error",
    [
        ({"layout": "rotating", "layout_options": '{"slices": 0}'}, "slices"),
        ({"layout": "standard", "layout_options": '{"growth": 2}'}, "takes no options"),
        ({"layout": "scalable", "layout_options": "[1, 2]"}, "A JSON object"),
        ({"layout": "scalable", "source": "auth.User.email"}, "cannot be rebuilt"),
        ({"layout": "rotating", "kind": "blocklist"}, "cannot be rebuilt"),
    ],
    ids=["bad-option", "no-options", "not-an-object", "bound-scalable", "rotating-blocklist"],
)
def test_the_admin_add_form_refuses_what_create_filter_would(
    fields, error, admin_client, redis_client, bloom_prefix
):
    resp = admin_add(admin_client, **fields)
    assert resp.status_code == 200  # the form again, with the error
    assert error in resp.content.decode()
    assert not BloomFilter.objects.filter(name="via-admin").exists()
    assert not redis_client.keys(f"{bloom_prefix}:*via-admin*")
