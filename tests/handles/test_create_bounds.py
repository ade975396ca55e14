"""Create is all-or-nothing, and a filter's size is bounded before anything is computed
large or written (issue 28, seam 3).

On the old code a sharded filter of ~36 MiB on a Redis with 20 MiB free was refused but
left its first segments behind with no row (``bloom delete`` could not reach them);
``capacity=10**12`` was accepted and began writing 2,235 segments of 512 MiB, and
``capacity=2**63-1`` made the Django process allocate until it died."""

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.core.management import CommandError, call_command
from django.test import override_settings
from django.urls import reverse

import django_bloom
from django_bloom.conf import DEFAULTS, get_config
from django_bloom.engine.kinds import layout_class, layout_names, layouts_with
from django_bloom.engine.kinds.capabilities import Rebuildable, ServerChecked
from django_bloom.engine.sizing import MAX_CAPACITY
from django_bloom.exceptions import FilterUnavailable
from django_bloom.models import BloomFilter
from django_bloom.registry import layout_for
from tests.admin.test_admin_add_form import ADD, form
from tests.conftest import caches_with, redisbloom_module

pytestmark = pytest.mark.django_db

BIG_BYTES = 36 * 2**20  # of keys: more than the 20 MiB a small Redis has


def capacity_for(layout: str, key_bytes: int) -> int:
    """The capacity whose filter of ``layout`` holds about ``key_bytes`` in Redis at full size
    (asked of the layout: its geometry and its keys; the rotating kind: its slices together)."""

    def size(capacity: int) -> int:
        options = layout_class(layout).validate_options({})
        row = BloomFilter(name="big", capacity=capacity, error_rate=0.01, layout=layout,
                          options=options)  # fmt: skip
        row.derive_geometry()
        return layout_for(row).key_bytes

    low, high = 1, 2**40
    while low < high:
        mid = (low + high) // 2
        low, high = (mid + 1, high) if size(mid) < key_bytes else (low, mid)
    return low


def refusal(layout: str, capacity: int) -> str:
    """What ``create_filter`` says to ``capacity``: the kind's own geometry refusal when it
    has one (the one-word layout cannot reach the rate), else the bound."""
    kind = layout_class(layout)
    try:
        kind.geometry(capacity, 0.01, kind.validate_options({}))
    except ValueError as exc:
        return str(exc)
    return "MAX_FILTER_BYTES"


@pytest.fixture
def small_redis(redis_server, bloom_prefix):
    """A Redis with a 20 MiB ``maxmemory`` (RedisBloom loaded when there is one)."""
    module = redisbloom_module()
    extra = ("--loadmodule", module) if module else ()
    server = redis_server("--maxmemory", "20mb", "--maxmemory-policy", "noeviction", *extra)
    with override_settings(CACHES=caches_with("small", server.url)):
        yield server.client()


@pytest.mark.slow  # starts a redis-server
@pytest.mark.parametrize("layout", layout_names())
def test_a_create_redis_refuses_part_way_leaves_no_key_and_no_row(small_redis, layout):
    if issubclass(layout_class(layout), ServerChecked) and redisbloom_module() is None:
        pytest.skip("no RedisBloom module here (the other kinds ran)")
    try:
        handle = django_bloom.create_filter(
            "big", capacity=capacity_for(layout, BIG_BYTES), layout=layout, cache_alias="small"
        )
    except FilterUnavailable as exc:
        assert "OOM" in str(exc)
        assert small_redis.keys("*") == []  # no segment, no control key, no counter
        assert not BloomFilter.objects.filter(name="big").exists()
    else:  # one command made all of it (Redis checks maxmemory before a command only)
        assert handle.layout.key_bytes > 20 * 2**20
        handle.delete()
        assert small_redis.keys("*") == []


@pytest.mark.slow
def test_a_sharded_create_bigger_than_the_free_memory_is_refused_whole(small_redis):
    with pytest.raises(FilterUnavailable, match="OOM"):
        django_bloom.create_filter(
            "big", capacity=30_000_000, layout="sharded", cache_alias="small"
        )
    assert small_redis.keys("*") == []
    assert not BloomFilter.objects.filter(name="big").exists()
    small = django_bloom.create_filter(
        "big", capacity=1_000_000, layout="sharded", cache_alias="small"
    )  # the name is free again
    assert small.add("x") and small.contains("x")
    small.delete()


@pytest.mark.slow
def test_bloom_create_and_the_admin_leave_nothing_either(small_redis, admin_client):
    with pytest.raises(CommandError, match="OOM"):
        call_command("bloom", "create", "big", "--capacity", "30000000", "--layout", "sharded",
                     "--cache-alias", "small")  # fmt: skip
    assert small_redis.keys("*") == []
    data = form(name="big", capacity="30000000", layout="sharded", cache_alias="small")
    html = admin_client.post(reverse(ADD), data).content.decode()
    assert "nothing was saved" in html and "OOM" in html
    assert small_redis.keys("*") == []
    assert not BloomFilter.objects.filter(name="big").exists()


ABSURD = [10**12, MAX_CAPACITY]


def test_the_default_bound_is_4_gib():
    assert DEFAULTS["MAX_FILTER_BYTES"] == 4 * 2**30


@pytest.mark.parametrize("capacity", ABSURD)
@pytest.mark.parametrize("layout", layout_names())
def test_an_absurd_capacity_is_refused_at_once_by_the_api(
    redis_client, bloom_prefix, kind_alias, layout, capacity
):
    alias = kind_alias(layout)
    with pytest.raises(ValueError) as refused:
        django_bloom.create_filter("huge", capacity=capacity, layout=layout, cache_alias=alias)
    assert refusal(layout, capacity) in str(refused.value)
    assert list(redis_client.scan_iter(match=f"{bloom_prefix}:*")) == []
    assert not BloomFilter.objects.filter(name="huge").exists()


@pytest.mark.parametrize("capacity", ABSURD)
def test_an_absurd_family_member_is_refused(redis_client, bloom_prefix, capacity):
    with pytest.raises(ValueError, match="MAX_FILTER_BYTES"):
        django_bloom.create_filter("huge", capacity=capacity, family=True)
    assert list(redis_client.scan_iter(match=f"{bloom_prefix}:*")) == []


@pytest.mark.parametrize("layout", layout_names())
def test_geometry_of_the_largest_capacity_is_computed_at_once(layout):
    """What the bound is checked on: every kind's geometry is a formula, whatever the
    capacity (it returns or refuses; it never allocates by the capacity)."""
    kind = layout_class(layout)
    try:
        bits, hashes = kind.geometry(MAX_CAPACITY, 0.01, kind.validate_options({}))
    except ValueError:
        return
    assert bits > 8 * DEFAULTS["MAX_FILTER_BYTES"] and hashes >= 1


def test_the_bound_is_a_setting(bloom_settings, bloom_prefix):
    bloom_settings(KEY_PREFIX=bloom_prefix, MAX_FILTER_BYTES=64 * 1024)
    with pytest.raises(ValueError, match=r"MAX_FILTER_BYTES allows \(65,536 bytes\)"):
        django_bloom.create_filter("f", capacity=100_000)
    f = django_bloom.create_filter("f", capacity=10_000)  # 11.7 KiB
    f.delete()


@pytest.mark.parametrize("value", ["4GB", 0, 2.5, None])
def test_a_bound_that_is_not_a_number_of_bytes_is_refused_when_read(settings, value):
    settings.DJANGO_BLOOM = {**settings.DJANGO_BLOOM, "MAX_FILTER_BYTES": value}
    with pytest.raises(ImproperlyConfigured, match="MAX_FILTER_BYTES"):
        get_config()


@pytest.mark.parametrize("capacity", ABSURD)
def test_an_absurd_capacity_is_a_command_error(redis_client, bloom_prefix, capacity):
    with pytest.raises(CommandError, match="MAX_FILTER_BYTES"):
        call_command("bloom", "create", "huge", "--capacity", str(capacity))
    assert list(redis_client.scan_iter(match=f"{bloom_prefix}:*")) == []
    assert not BloomFilter.objects.filter(name="huge").exists()


def test_an_absurd_capacity_is_a_form_error(admin_client, redis_client, bloom_prefix, kind_alias):
    for layout in layout_names():
        for capacity in ABSURD:
            data = form(capacity=str(capacity), layout=layout, cache_alias=kind_alias(layout))
            html = admin_client.post(reverse(ADD), data).content.decode()
            assert "errornote" in html and refusal(layout, capacity).split(":")[0] in html
    assert list(redis_client.scan_iter(match=f"{bloom_prefix}:*")) == []
    assert not BloomFilter.objects.filter(name="via-admin").exists()


@pytest.mark.parametrize("layout", layouts_with(Rebuildable))
def test_a_resize_past_the_bound_is_refused_before_anything_is_written(kind_alias, layout):
    alias = kind_alias(layout)
    f = django_bloom.create_filter("f", capacity=1000, layout=layout, cache_alias=alias)
    f.add("kept")
    with pytest.raises(ValueError, match="MAX_FILTER_BYTES|MAX_SEGMENT_BYTES"):
        f.rebuild(["kept"], capacity=10**12)
    assert django_bloom.get_filter("f", refresh=True).contains("kept")
