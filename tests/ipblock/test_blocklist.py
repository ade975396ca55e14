"""The blocklist service (django_bloom.ipblock) against real Redis."""

import bisect
import ipaddress
import random
from datetime import timedelta

import pytest
from django.utils import timezone

from django_bloom import ipblock as blocklist
from django_bloom import services
from django_bloom.engine.storage import Storage
from django_bloom.exceptions import FilterKeyMissing, FilterUnavailable, RedisUnreachable
from django_bloom.models import BlockedEntry, BloomFilter

pytestmark = pytest.mark.django_db

NETWORKS = ["10.0.0.0/8", "198.18.4.0/22", "203.0.113.77/32", "2001:db8:1::/48"]


@pytest.fixture
def listed():
    for network in NETWORKS:
        blocklist.block(network, reason=f"test {network}")
    return [ipaddress.ip_network(n) for n in NETWORKS]


@pytest.fixture
def roundtrips(monkeypatch):
    """Counts Redis round trips made through Storage (every hot-path call goes there)."""
    calls = []
    for method in ("_send", "_call", "_eval"):
        original = getattr(Storage, method)

        def counted(self, *args, _original=original, _name=method, **kwargs):
            calls.append(_name)
            return _original(self, *args, **kwargs)

        monkeypatch.setattr(Storage, method, counted)
    return calls


def addresses_of(network, rng, samples=20):
    """First, last and some random addresses of a network (every one if it is small)."""
    size = network.num_addresses
    if size <= 256:
        return list(network)
    offsets = {0, size - 1, *(rng.randrange(size) for _ in range(samples))}
    return [network.network_address + o for o in sorted(offsets)]


def test_networks_of_every_size_block_every_address_sampled(listed):
    rng = random.Random(3)
    for network in listed:
        for address in addresses_of(network, rng):
            decision = blocklist.check_ip(address)
            assert decision.blocked, (address, network, decision)
            assert decision.network == str(network)
            assert decision.entry.reason == f"test {network}"
            assert decision.reason == blocklist.BLOCKED


@pytest.mark.parametrize(
    "outside",
    [
        "11.0.0.0",
        "9.255.255.255",
        "198.18.3.255",
        "198.18.8.0",
        "203.0.113.76",
        "203.0.113.78",
        "2001:db8:2::",
        "2001:db8:0:ffff:ffff:ffff:ffff:ffff",
        "8.8.8.8",
    ],
)
def test_neighbours_just_outside_pass(listed, outside):
    decision = blocklist.check_ip(outside)
    assert not decision.blocked and decision.reason == blocklist.NOT_LISTED


def test_candidates_are_the_address_masked_at_each_length():
    address = ipaddress.ip_address("198.18.5.9")
    assert blocklist.candidate_networks(address, (32, 22, 8, 0)) == [
        "198.18.5.9/32",
        "198.18.4.0/22",
        "198.0.0.0/8",
        "0.0.0.0/0",
    ]
    v6 = ipaddress.ip_address("2001:db8:1:2::9")
    assert blocklist.candidate_networks(v6, (48, 128)) == ["2001:db8:1::/48", "2001:db8:1:2::9/128"]


def test_prefix_lengths_come_from_active_rows_per_version(listed):
    assert blocklist.prefix_lengths() == {4: (32, 22, 8), 6: (48,)}
    BlockedEntry.objects.filter(network="198.18.4.0/22").update(
        expires_at=timezone.now() - timedelta(seconds=1)
    )
    blocklist.forget_caches()
    assert blocklist.prefix_lengths() == {4: (32, 8), 6: (48,)}


def test_no_round_trip_and_no_query_per_check_once_warm(
    listed, roundtrips, django_assert_num_queries, bloom_settings
):
    """The list's filter is mirrored (``BLOCKLIST_MIRROR``): checks read the local copy.
    (No invalidation messages: those of this test's own writes come when they come; an
    hour's interval: no re-check falls due however busy the machine.)"""
    bloom_settings(MIRROR_TRACKING=False, MIRROR_REFRESH_SECONDS=3600)
    blocklist.check_ip("10.1.2.3")  # warms prefix lengths, the copy, the confirmation cache
    blocklist.check_ip("8.8.8.8")
    roundtrips.clear()
    with django_assert_num_queries(0):
        assert blocklist.check_ip("10.1.2.3").blocked
        assert not blocklist.check_ip("8.8.8.8").blocked
        assert not blocklist.check_ip("2001:db8:9::1").blocked
    assert roundtrips == []


def test_one_round_trip_per_check_without_the_mirror(
    listed, roundtrips, django_assert_num_queries, bloom_settings
):
    bloom_settings(BLOCKLIST_MIRROR=False)
    blocklist.check_ip("10.1.2.3")
    blocklist.check_ip("8.8.8.8")
    roundtrips.clear()
    with django_assert_num_queries(0):
        assert blocklist.check_ip("10.1.2.3").blocked
        assert not blocklist.check_ip("8.8.8.8").blocked
        assert not blocklist.check_ip("2001:db8:9::1").blocked
    assert roundtrips == ["_send"] * 3
    roundtrips.clear()
    assert blocklist.check_ip("127.0.0.1").reason == blocklist.ALLOWLISTED
    assert blocklist.check_ip("junk").reason == blocklist.UNKNOWN
    assert roundtrips == []


def test_a_block_that_returned_refuses_at_once_in_this_process():
    """Never an unblocked check for an address whose ``block()`` returned here: the copy
    gets this process's bits at once and the caches are dropped (a new prefix length, a
    cached "not listed" confirmation), whichever thread asks."""
    rng = random.Random(7)
    blocklist.block("198.51.100.0/24")
    for length in (32, 29, 23, 17, 30, 12, 31, 20):
        address = ipaddress.ip_address(rng.randrange(1 << 24, 200 << 24))
        network = ipaddress.ip_network(f"{address}/{length}", strict=False)
        assert not blocklist.check_ip(address).blocked  # caches warm with it unlisted
        blocklist.block(network)
        assert blocklist.check_ip(address).blocked, network


@pytest.mark.parametrize("mirrored", [True, False])
def test_no_entries_of_a_version_means_no_redis_at_all(roundtrips, bloom_settings, mirrored):
    bloom_settings(BLOCKLIST_MIRROR=mirrored, MIRROR_TRACKING=False, MIRROR_REFRESH_SECONDS=3600)
    blocklist.block("203.0.113.0/24")
    blocklist.check_ip("203.0.113.1")  # the copy is loaded (mirrored)
    roundtrips.clear()
    assert blocklist.check_ip("2001:db8::1").reason == blocklist.NOT_LISTED
    assert roundtrips == []


def test_allowlist_wins_over_a_listing():
    blocklist.block("127.0.0.0/8")
    blocklist.block("192.168.0.0/16")
    assert blocklist.check_ip("127.0.0.1").reason == blocklist.ALLOWLISTED
    assert blocklist.check_ip("::ffff:127.0.0.1").reason == blocklist.ALLOWLISTED
    assert blocklist.check_ip("192.168.1.1").blocked


def test_allowlist_setting(settings):
    blocklist.block("192.168.0.0/16")
    settings.DJANGO_BLOOM = {**settings.DJANGO_BLOOM, "ALLOWLIST": ["192.168.7.0/24"]}
    assert blocklist.check_ip("192.168.7.7").reason == blocklist.ALLOWLISTED
    assert blocklist.check_ip("192.168.8.7").blocked


def test_expired_entries_do_not_block():
    soon = timezone.now() + timedelta(hours=1)
    blocklist.block("203.0.113.0/24", expires_at=soon)
    assert blocklist.check_ip("203.0.113.5").blocked
    later = blocklist.check_ip("203.0.113.5", now=soon + timedelta(seconds=1))
    assert not later.blocked and later.reason == blocklist.EXPIRED
    # Expired in the database (cached confirmation or not): not blocked.
    BlockedEntry.objects.update(expires_at=timezone.now() - timedelta(seconds=1))
    blocklist.forget_caches()
    blocklist.block("198.51.100.0/24")  # keeps /24 in use
    decision = blocklist.check_ip("203.0.113.5")
    assert not decision.blocked and decision.reason == blocklist.EXPIRED
    assert "203.0.113.0/24" not in list(blocklist.iter_filter_items())


def test_filter_false_positive_never_blocks():
    blocklist.block("198.51.100.0/24")  # puts /24 among the lengths in use
    services.get_filter("ip-blocklist").add("203.0.113.0/24")  # a "hit" with no row
    decision = blocklist.check_ip("203.0.113.9")
    assert not decision.blocked and decision.reason == blocklist.FALSE_POSITIVE
    assert blocklist.check_ip("198.51.100.9").blocked


def test_unblock():
    blocklist.block("203.0.113.0/24")
    assert blocklist.check_ip("203.0.113.9").blocked
    assert blocklist.unblock("203.0.113.9/24") == 1
    assert not blocklist.check_ip("203.0.113.9").blocked
    assert blocklist.unblock("203.0.113.0/24") == 0


def test_block_normalises_updates_and_validates():
    entry = blocklist.block("::ffff:203.0.113.9", reason="first")
    assert entry.network == "203.0.113.9/32" and entry.list_name == "ip-blocklist"
    blocklist.block("203.0.113.9", reason="second")
    assert BlockedEntry.objects.get().reason == "second"
    for bad in ("banana", "10.0.0.0/33", ""):
        with pytest.raises(ValueError):
            blocklist.block(bad)
    with pytest.raises(ValueError):
        blocklist.block("10.0.0.0/8", expires_at=timezone.now() - timedelta(days=1))
    with pytest.raises(TypeError):
        blocklist.block("10.0.0.0/8", expires_at="tomorrow")
    assert BlockedEntry.objects.count() == 1


def test_separate_lists():
    blocklist.block("203.0.113.0/24", list_name="scrapers")
    assert blocklist.check_ip("203.0.113.1", list_name="scrapers").blocked
    assert not blocklist.check_ip("203.0.113.1").blocked
    assert services.get_filter("scrapers").meta.kind == BloomFilter.Kind.BLOCKLIST


def test_block_with_redis_down_writes_nothing():
    blocklist.block("198.51.100.0/24")
    BloomFilter.objects.update(cache_alias="dead")
    services.forget_filters()
    with pytest.raises(RedisUnreachable):
        blocklist.block("203.0.113.0/24")
    assert list(BlockedEntry.objects.values_list("network", flat=True)) == ["198.51.100.0/24"]
    with pytest.raises(FilterUnavailable):
        blocklist.check_ip("198.51.100.1")


def test_lost_key_raises_instead_of_answering_absent_and_block_rebuilds(redis_client):
    blocklist.block("198.51.100.0/24")
    redis_client.delete(services.get_filter("ip-blocklist").layout.segment.keys.bits)
    with pytest.raises(FilterKeyMissing):
        blocklist.check_ip("198.51.100.1")
    blocklist.block("203.0.113.0/24")  # notices the lost key and rebuilds from the rows
    assert blocklist.check_ip("198.51.100.1").blocked
    assert blocklist.check_ip("203.0.113.1").blocked


def test_ensure_filter_fills_a_new_filter_from_existing_rows():
    BlockedEntry.objects.create(network="203.0.113.0/24")
    BlockedEntry.objects.create(
        network="198.51.100.0/24", expires_at=timezone.now() - timedelta(days=1)
    )
    f = blocklist.ensure_blocklist_filter(capacity=1000)
    assert f.meta.capacity == 1000 and f.meta.error_rate == 0.0001
    assert f.contains_many(["203.0.113.0/24"]) == [True]
    assert blocklist.check_ip("203.0.113.7").blocked
    assert blocklist.ensure_blocklist_filter().meta.pk == f.meta.pk


def test_rebuild_blocklist_drops_unblocked_items():
    blocklist.block("203.0.113.0/24")
    blocklist.block("198.51.100.0/24")
    blocklist.unblock("198.51.100.0/24")
    assert blocklist.rebuild_blocklist() == 1
    f = services.get_filter("ip-blocklist")
    assert f.contains_many(["203.0.113.0/24", "198.51.100.0/24"]) == [True, False]


# -- the real FireHOL level-1 list ----------------------------------------------
def _spans(networks):
    disjoint = ipaddress.collapse_addresses(n for n in networks if n.version == 4)
    spans = [(int(n.network_address), int(n.broadcast_address)) for n in disjoint]
    return [s for s, _ in spans], spans


def _covered(value, starts, spans):
    i = bisect.bisect_right(starts, value) - 1
    return i >= 0 and spans[i][0] <= value <= spans[i][1]


def test_firehol_sample_blocked_and_random_outsiders_pass(firehol_path):
    result = blocklist.import_netset(firehol_path, reason="firehol_level1")
    assert result.added > 2500 and not result.errors
    networks = [
        ipaddress.ip_network(n) for n in BlockedEntry.objects.values_list("network", flat=True)
    ]
    allow = blocklist.ip.allowlist()
    rng = random.Random(20240601)
    eligible = [n for n in networks if not any(n.overlaps(a) for a in allow if a.version == 4)]
    sample = rng.sample(eligible, 50)
    checked = 0
    for network in sample:
        for address in addresses_of(network, rng, samples=8):
            decision = blocklist.check_ip(address)
            assert decision.blocked, (str(address), str(network), decision)
            assert decision.entry.reason == "firehol_level1"
            checked += 1
    assert checked >= 150

    # FireHOL lists 127.0.0.0/8; the default allowlist still lets loopback through.
    assert any(str(n) == "127.0.0.0/8" for n in networks)
    assert blocklist.check_ip("127.0.0.1").reason == blocklist.ALLOWLISTED

    starts, spans = _spans(networks)
    outsiders = 0
    while outsiders < 300:
        value = rng.getrandbits(32)
        address = ipaddress.IPv4Address(value)
        if not address.is_global or _covered(value, starts, spans):
            continue
        decision = blocklist.check_ip(address)
        assert not decision.blocked, (str(address), decision)
        outsiders += 1
