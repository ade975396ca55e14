"""Netset parsing (django_bloom.netset) and import_netset (django_bloom.ipblock)."""

import io
import time
from datetime import timedelta

import pytest
from django.utils import timezone

from django_bloom import ipblock as blocklist
from django_bloom.ipblock import netset
from django_bloom.models import BlockedEntry
from django_bloom.services import get_filter

SAMPLE = """\
# FireHOL-style header
# Entries         : 5 subnets

1.2.3.4
10.0.0.0/8 # inline comment
not-an-address
2001:DB8::/48
300.1.2.3
1.2.3.4
192.0.2.0/24 ; SBL12345
198.51.100.10-198.51.100.13
\t
1.2.3.4 5.6.7.8
"""


def test_parse_netset_reports_bad_lines_with_numbers():
    entries, errors = netset.parse_netset(SAMPLE.splitlines())
    assert [e.text for e in entries] == [
        "1.2.3.4/32",
        "10.0.0.0/8",
        "2001:db8::/48",
        "1.2.3.4/32",
        "192.0.2.0/24",
        "198.51.100.10/31",
        "198.51.100.12/31",
    ]
    assert [(e.lineno, e.line) for e in errors] == [
        (6, "not-an-address"),
        (8, "300.1.2.3"),
        (13, "1.2.3.4 5.6.7.8"),
    ]
    assert "not an IP address" in errors[0].message
    assert "one address or network per line" in errors[2].message


def test_parse_netset_sources(tmp_path):
    path = tmp_path / "x.netset"
    path.write_bytes(b"\xef\xbb\xbf10.0.0.0/8\r\n\xff\xfe\r\n::1\n")
    for source in (path, str(path), open(path, "rb"), io.StringIO("10.0.0.0/8\n\x00\n::1\n")):
        entries, errors = netset.parse_netset(source)
        assert [e.text for e in entries] == ["10.0.0.0/8", "::1/128"]
        assert [e.lineno for e in errors] == [2]
    with pytest.raises(TypeError):
        netset.parse_netset(b"10.0.0.0/8")


@pytest.mark.parametrize("bad", ["1.2.3.9-1.2.3.1", "1.2.3.4-::1", "1.2.3.4-x", "x" * 300])
def test_bad_ranges_and_long_lines(bad):
    with pytest.raises(ValueError):
        netset.parse_line(bad)


@pytest.mark.django_db
def test_import_netset_writes_rows_and_filter():
    result = blocklist.import_netset(SAMPLE.splitlines(), reason="test list")
    assert (result.added, result.duplicates) == (6, 1)
    assert [(n, line) for n, line, _ in result.errors] == [
        (6, "not-an-address"),
        (8, "300.1.2.3"),
        (13, "1.2.3.4 5.6.7.8"),
    ]
    networks = set(BlockedEntry.objects.values_list("network", flat=True))
    assert networks == {
        "1.2.3.4/32",
        "10.0.0.0/8",
        "2001:db8::/48",
        "192.0.2.0/24",
        "198.51.100.10/31",
        "198.51.100.12/31",
    }
    f = get_filter("ip-blocklist")
    assert f.meta.kind == "blocklist"
    assert all(f.contains_many(sorted(networks)))
    assert set(BlockedEntry.objects.values_list("reason", flat=True)) == {"test list"}


@pytest.mark.django_db
def test_reimport_counts_duplicates_and_extends_expiry():
    soon = timezone.now() + timedelta(days=1)
    later = timezone.now() + timedelta(days=7)
    first = blocklist.import_netset(["203.0.113.0/24", "198.51.100.7"], expires_at=soon)
    assert (first.added, first.duplicates, first.refreshed) == (2, 0, 0)
    again = blocklist.import_netset(["203.0.113.0/24", "192.0.2.1"], expires_at=later)
    assert (again.added, again.duplicates, again.refreshed) == (1, 1, 1)
    row = BlockedEntry.objects.get(network="203.0.113.0/24")
    assert row.expires_at == later
    # An earlier expiry never shortens a listing.
    blocklist.import_netset(["203.0.113.0/24"], expires_at=soon)
    assert BlockedEntry.objects.get(network="203.0.113.0/24").expires_at == later


@pytest.mark.django_db
def test_import_with_only_bad_lines_writes_nothing():
    result = blocklist.import_netset(["# nothing", "junk"])
    assert (result.added, result.duplicates) == (0, 0) and len(result.errors) == 1
    assert not BlockedEntry.objects.exists()


@pytest.mark.django_db
def test_import_rejects_bad_arguments_and_writes_nothing():
    with pytest.raises(ValueError, match="not in the future"):
        blocklist.import_netset(["10.0.0.0/8"], expires_at=timezone.now() - timedelta(days=1))
    with pytest.raises(ValueError, match="longer than"):
        blocklist.import_netset(["10.0.0.0/8"], reason="x" * 201)
    with pytest.raises(ValueError, match="invalid filter name"):
        blocklist.import_netset(["10.0.0.0/8"], list_name="bad name")
    assert not BlockedEntry.objects.exists()


@pytest.mark.django_db
def test_import_grows_a_full_filter_by_rebuilding():
    blocklist.ensure_blocklist_filter(capacity=10)
    lines = [f"10.{i // 256}.{i % 256}.0/24" for i in range(40)]
    result = blocklist.import_netset(lines)
    assert result.added == 40
    f = get_filter("ip-blocklist", refresh=True)
    assert f.meta.capacity >= 40
    assert all(f.contains_many([blocklist.ip.normalize_network(x) for x in lines]))


@pytest.mark.django_db
def test_import_recovers_a_lost_filter_key(redis_client):
    blocklist.import_netset(["203.0.113.0/24"])
    f = get_filter("ip-blocklist")
    redis_client.delete(f.layout.segment.keys.bits)
    blocklist.import_netset(["198.51.100.0/24"])
    f = get_filter("ip-blocklist", refresh=True)
    assert f.contains_many(["203.0.113.0/24", "198.51.100.0/24"]) == [True, True]


@pytest.mark.django_db
def test_import_firehol_file(firehol_path, capsys):
    started = time.perf_counter()
    result = blocklist.import_netset(firehol_path)
    elapsed = time.perf_counter() - started
    with capsys.disabled():
        print(f"\nFireHOL level1 import: {result.added} entries in {elapsed:.2f}s")
    assert result.added > 2500 and not result.errors
    assert BlockedEntry.objects.count() == result.added
    items = list(blocklist.iter_filter_items())
    assert len(items) == result.added
    assert all(get_filter("ip-blocklist").contains_many(items))
