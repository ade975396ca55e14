"""``bloom verify``: bits zeroed in place are found, and ``--repair`` sets exactly those."""

import io

import pytest
from django.core.management import CommandError, call_command

import django_bloom
from django_bloom import ipblock as blocklist
from django_bloom.exceptions import BloomError, FilterKeyMissing
from django_bloom.models import BlockedEntry
from django_bloom.ops import verify
from tests.testapp.models import Account

pytestmark = pytest.mark.django_db

USERS = 3000


@pytest.fixture
def accounts():
    Account.objects.bulk_create(
        Account(username=f"user{i}", email=f"user{i}@example.org") for i in range(USERS)
    )
    return [f"user{i}" for i in range(USERS)]


@pytest.fixture(params=[("blake2b", "standard"), ("murmur3", "blocked")], ids=lambda p: p[0])
def bound(request, accounts):
    hasher, layout = request.param
    f = django_bloom.create_filter(
        "usernames",
        capacity=5000,
        source="testapp.Account.username",
        hasher=hasher,
        layout=layout,
    )
    f.rebuild(accounts)
    return f


def zero(redis_client, f, start, length):
    redis_client.setrange(f.layout.segment.keys.bits, start, bytes(length))


def test_a_healthy_filter_verifies_clean(bound, accounts):
    bound.add("not-in-the-source")  # extra bits are normal: never reported
    report = verify.verify_filter("usernames", chunk_bytes=1000, pause=0)
    assert report.ok and report.items == USERS
    assert report.bits_needed > USERS and report.bits_missing == 0
    assert report.round_trips == -(-bound.layout.segment.num_bytes // 1000)  # chunked reads
    out = io.StringIO()
    call_command("bloom", "verify", "usernames", stdout=out)  # exit 0: no SystemExit
    assert "Redis lacks 0" in out.getvalue()


def test_zeroed_bytes_are_found_then_repaired(redis_client, bound, accounts):
    before = redis_client.getrange(bound.layout.segment.keys.bits, 0, -1)
    zero(redis_client, bound, 1000, 500)  # length and trailer kept: nothing else notices
    assert redis_client.strlen(bound.layout.segment.keys.bits) == bound.layout.key_bytes
    assert not all(bound.contains_many(accounts))  # silent false "absent" answers

    report = verify.verify_filter("usernames", chunk_bytes=4096, pause=0)
    lost = sum(bin(b).count("1") for b in before[1000:1500])
    assert report.bits_missing == lost > 0
    assert 1000 <= report.first_offsets[0] < 1500 and report.first_offsets == sorted(
        report.first_offsets
    )
    answers = bound.contains_many(accounts)
    assert report.items_affected == answers.count(False)
    assert report.bits_repaired == 0  # found, not touched

    repaired = verify.verify_filter("usernames", repair=True, chunk_bytes=4096, pause=0)
    assert repaired.bits_repaired == lost
    assert all(bound.contains_many(accounts))
    assert [bound.contains(a) for a in accounts[::50]] == [True] * len(accounts[::50])
    assert redis_client.getrange(bound.layout.segment.keys.bits, 0, -2 - 15) == before[:-16]
    assert verify.verify_filter("usernames", pause=0).ok


def test_repair_only_sets_bits_and_keeps_concurrent_writes(redis_client, bound, accounts):
    zero(redis_client, bound, 0, bound.layout.segment.num_bytes)  # everything lost...
    bound.add("written-meanwhile")  # ...then a live write
    report = verify.verify_filter("usernames", repair=True, pause=0)
    assert report.bits_repaired == report.bits_missing > 0
    assert bound.contains("written-meanwhile") and all(bound.contains_many(accounts))


def test_command_exit_codes_and_output(redis_client, bound):
    zero(redis_client, bound, 200, 100)
    out = io.StringIO()
    with pytest.raises(SystemExit) as info:
        call_command("bloom", "verify", "usernames", stdout=out)
    assert info.value.code == 1
    assert "MISSING" in out.getvalue() and "--repair" in out.getvalue()
    with pytest.raises(SystemExit) as info:  # damage found: still 1, and now repaired
        call_command("bloom", "verify", "usernames", "--repair", stdout=out)
    assert info.value.code == 1 and "Repaired: set" in out.getvalue()
    call_command("bloom", "verify", "usernames", stdout=io.StringIO())  # clean again: exit 0


def test_blocklist_is_verified_against_its_rows(redis_client, bloom_settings):
    bloom_settings(BLOCKLIST_MIRROR=False)  # the checks below read Redis's bits, not a copy
    networks = [f"198.51.{i}.0/24" for i in range(200)] + ["203.0.113.7"]
    blocklist.import_netset(networks, list_name="ip-blocklist")
    f = django_bloom.get_filter("ip-blocklist", refresh=True)
    assert verify.verify_filter("ip-blocklist", pause=0).ok
    zero(redis_client, f, 0, f.layout.segment.num_bytes)
    assert blocklist.check_ip("203.0.113.7").blocked is False  # the damage lets it through
    report = verify.verify_filter("ip-blocklist", repair=True, pause=0)
    assert report.items == BlockedEntry.objects.count() and report.bits_repaired > 0
    blocklist.forget_caches()
    assert blocklist.check_ip("203.0.113.7").blocked


def test_an_unbound_filter_gets_a_clear_error():
    django_bloom.create_filter("free", capacity=100)
    with pytest.raises(ValueError, match="no bound source"):
        verify.verify_filter("free")
    with pytest.raises(CommandError, match="no bound source") as info:
        call_command("bloom", "verify", "free")
    assert info.value.returncode == 2


def test_a_lost_key_is_reported_not_verified(redis_client, bound):
    redis_client.delete(bound.layout.segment.keys.bits)
    with pytest.raises(FilterKeyMissing, match="rebuild"):
        verify.verify_filter("usernames", repair=True)
    assert not redis_client.exists(bound.layout.segment.keys.bits)  # repair never recreated it


def test_repair_sends_one_bounded_or_script_per_damaged_chunk(redis_client, bound, sent_commands):
    size = bound.layout.segment.num_bytes
    zero(redis_client, bound, 0, 4096)  # the first two chunks of 2,048 bytes
    sent_commands.clear()
    report = verify.verify_filter("usernames", repair=True, chunk_bytes=2048, pause=0)
    writes = [c for c in sent_commands if b"BITOP" in c]  # Storage.or_range: sets, never clears
    assert len(writes) == 2 and report.bits_repaired == report.bits_missing > 0
    assert all(b"$2048\r\n" in c and len(c) < 2048 + 2000 for c in writes)  # a chunk each
    reads = [c for c in sent_commands if b"GETRANGE" in c]
    assert len(reads) >= size // 2048  # bounded reads
    assert verify.verify_filter("usernames", pause=0).ok


def test_verify_waits_for_a_running_rebuild(bound):
    assert bound.storage.begin_build(bound.layout.segment, "token")
    try:
        with pytest.raises(BloomError, match="rebuild"):
            verify.verify_filter("usernames")
    finally:
        bound.storage.abort_build(bound.layout.segment, "token")
    assert verify.verify_filter("usernames", pause=0).ok
