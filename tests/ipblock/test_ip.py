"""Client-IP resolution and normalisation (django_bloom.ipblock.ip)."""

import ipaddress

import pytest
from django.conf import settings
from django.test import RequestFactory, override_settings

from django_bloom.ipblock import ip

rf = RequestFactory()


def request(remote_addr, forwarded=None):
    extra = {"REMOTE_ADDR": remote_addr}
    if forwarded is not None:
        extra["HTTP_X_FORWARDED_FOR"] = forwarded
    return rf.get("/", **extra)


def client_ip(req, proxies=None):
    """The client's address as text, as the middleware sets ``request.bloom_client_ip``;
    ``proxies``: the TRUSTED_PROXIES setting to read it with (None: as configured)."""
    if proxies is None:
        address = ip.client_address(req)
    else:
        config = {**settings.DJANGO_BLOOM, "TRUSTED_PROXIES": proxies}
        with override_settings(DJANGO_BLOOM=config):
            address = ip.client_address(req)
    return None if address is None else str(address)


# -- normalisation --------------------------------------------------------------
@pytest.mark.parametrize(
    "raw, expected",
    [
        ("1.2.3.4", "1.2.3.4"),
        (" 1.2.3.4 \n", "1.2.3.4"),
        ("::ffff:1.2.3.4", "1.2.3.4"),  # IPv4-mapped IPv6 is the IPv4 address
        ("::FFFF:192.0.2.1", "192.0.2.1"),
        ("2001:0DB8:0000:0000:0000:0000:0000:0001", "2001:db8::1"),  # compressed, lower
        ("fe80::1%eth0", "fe80::1"),  # zone id stripped
        ("fe80::1%25", "fe80::1"),
        (b"10.0.0.1", "10.0.0.1"),
        (ipaddress.ip_address("::ffff:10.0.0.1"), "10.0.0.1"),
    ],
)
def test_normalize_ip(raw, expected):
    assert str(ip.parse_ip(raw)) == expected


@pytest.mark.parametrize(
    "junk",
    [
        None,
        "",
        "   ",
        "unknown",
        "300.1.2.3",
        "1.2.3",
        "01.2.3.4",  # leading zeros are ambiguous (octal?) and refused by ipaddress
        "1.2.3.4/24",
        "1.2.3.4:80",
        "::g",
        "x" * 10_000,
        b"\xff\xfe",
        12345,
        ["1.2.3.4"],
        "1.2.3.4\x00",
    ],
)
def test_garbage_is_unknown_never_a_crash(junk):
    assert ip.parse_ip(junk) is None


@pytest.mark.parametrize(
    "raw, expected",
    [
        ("10.1.2.3/8", "10.0.0.0/8"),  # host bits dropped
        ("198.51.100.7", "198.51.100.7/32"),
        ("2001:DB8:1:0::/48", "2001:db8:1::/48"),
        ("2001:db8::1", "2001:db8::1/128"),
        ("::ffff:203.0.113.0/120", "203.0.113.0/24"),  # mapped network -> IPv4 network
        ("::ffff:203.0.113.9", "203.0.113.9/32"),
        ("fe80::%eth0/64", "fe80::/64"),
    ],
)
def test_normalize_network(raw, expected):
    assert ip.normalize_network(raw) == expected


@pytest.mark.parametrize("junk", ["", "banana", "10.0.0.0/33", "2001:db8::/129", None, "1.2.3.4/x"])
def test_bad_network_is_a_clear_value_error(junk):
    with pytest.raises(ValueError, match="not an IP address or CIDR network"):
        ip.normalize_network(junk)


# -- client address -------------------------------------------------------------
def test_remote_addr_by_default_and_header_ignored():
    req = request("203.0.113.9", forwarded="1.1.1.1")
    assert client_ip(req) == "203.0.113.9"
    assert client_ip(req, proxies=[]) == "203.0.113.9"


def test_header_ignored_when_peer_is_not_a_trusted_proxy():
    # A client talking to us directly cannot pick its address with a header.
    req = request("203.0.113.9", forwarded="127.0.0.1")
    assert client_ip(req, proxies=["10.0.0.0/8"]) == "203.0.113.9"


def test_trusted_proxy_chain_walked_from_the_right():
    # client 198.51.100.20 -> CDN edge 10.1.1.1 -> our proxy 10.0.0.2 -> app.
    # The client prepended a fake entry; it is left of the real one and ignored.
    req = request("10.0.0.2", forwarded="6.6.6.6, 198.51.100.20, 10.1.1.1")
    assert client_ip(req, proxies=["10.0.0.0/8"]) == "198.51.100.20"


def test_spoofed_entries_left_of_the_first_untrusted_hop_are_ignored():
    req = request("10.0.0.2", forwarded="127.0.0.1, 10.9.9.9, 203.0.113.5")
    assert client_ip(req, proxies=["10.0.0.0/8"]) == "203.0.113.5"


def test_trusted_proxy_without_header_is_the_client():
    assert client_ip(request("10.0.0.2"), proxies=["10.0.0.0/8"]) == "10.0.0.2"
    assert client_ip(request("10.0.0.2", "  "), proxies=["10.0.0.0/8"]) == "10.0.0.2"


def test_all_hops_trusted_gives_the_leftmost():
    req = request("10.0.0.2", forwarded="10.0.0.7, 10.0.0.3")
    assert client_ip(req, proxies=["10.0.0.0/8"]) == "10.0.0.7"


def test_forwarded_odd_forms():
    proxies = ["10.0.0.0/8", "2001:db8:ffff::/48"]
    assert client_ip(request("10.0.0.2", "::ffff:198.51.100.1"), proxies) == "198.51.100.1"
    assert client_ip(request("10.0.0.2", "198.51.100.1:4711"), proxies) == "198.51.100.1"
    assert client_ip(request("10.0.0.2", "[2001:db8::5]:443"), proxies) == "2001:db8::5"
    assert client_ip(request("::ffff:10.0.0.2", "2001:db8::5"), proxies) == "2001:db8::5"
    assert client_ip(request("2001:db8:ffff::1", "fe80::9%eth0"), proxies) == "fe80::9"
    # Garbage where a trusted proxy should have written an address: unknown.
    assert client_ip(request("10.0.0.2", "unknown"), proxies) is None
    assert client_ip(request("10.0.0.2", "203.0.113.1, junk"), proxies) is None


def test_garbage_remote_addr_is_unknown_even_with_a_header():
    assert client_ip(request("junk", "198.51.100.1"), proxies=["10.0.0.0/8"]) is None
    req = rf.get("/")
    del req.META["REMOTE_ADDR"]
    assert client_ip(req) is None


def test_settings_are_read_and_reparsed_when_they_change(settings):
    req = request("10.0.0.2", forwarded="198.51.100.1")
    assert client_ip(req) == "10.0.0.2"
    settings.DJANGO_BLOOM = {**settings.DJANGO_BLOOM, "TRUSTED_PROXIES": ["10.0.0.0/24"]}
    assert client_ip(req) == "198.51.100.1"
    settings.DJANGO_BLOOM = {**settings.DJANGO_BLOOM, "ALLOWLIST": ["198.51.100.0/24"]}
    assert ip.is_allowlisted("198.51.100.1") and not ip.is_allowlisted("127.0.0.1")


def test_default_allowlist_is_loopback():
    assert ip.is_allowlisted("127.0.0.1") and ip.is_allowlisted("127.255.0.9")
    assert ip.is_allowlisted("::1") and ip.is_allowlisted("::ffff:127.0.0.1")
    assert not ip.is_allowlisted("10.0.0.1") and not ip.is_allowlisted("junk")


def test_invalid_proxy_setting_is_a_value_error():
    with pytest.raises(ValueError):
        ip.parse_networks(["10.0.0.0/8", "nonsense"])
