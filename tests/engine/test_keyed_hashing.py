"""Keyed hashing (issue 11, "crafted collisions"): keyed BLAKE2b beside the legacy MurmurHash3.

The seed-independent MurmurHash3 multicollision cannot be rebuilt here cheaply,
so these tests pin the property that defeats it: a keyed filter's positions
depend on a secret key, not only on a seed anyone with the row can read.
"""

import hashlib
import importlib
import io
import re

import mmh3
import pytest
from django.core.management import call_command
from django.urls import reverse

import django_bloom
from django_bloom.engine import hashers, hashing
from django_bloom.exceptions import FilterKeyMissing
from django_bloom.models import BloomFilter
from django_bloom.services import get_filter
from tests.bare_layouts import bare_layout, layout_bitmap

pytestmark = pytest.mark.django_db

ITEMS = [f"member-{i}@example.com" for i in range(2000)]


def bitmap(redis_client, f):
    return redis_client.getrange(f.layout.segment.keys.bits, 0, f.layout.segment.num_bytes - 1)


def key_hex(meta):
    return meta.hasher.partition("$")[2]


def test_new_filters_are_keyed_with_a_random_key_each():
    a = django_bloom.create_filter("k-a", capacity=1000)
    b = django_bloom.create_filter("k-b", capacity=1000)
    assert a.meta.hasher.startswith("blake2b$") and a.hasher.keyed
    assert re.fullmatch(r"[0-9a-f]{32}", key_hex(a.meta))  # 128 bits
    assert key_hex(a.meta) != key_hex(b.meta)


@pytest.mark.parametrize("layout", ["standard", "blocked"])
def test_a_murmur3_filter_answers_bit_for_bit_as_before(redis_client, layout):
    """Filters made before keyed hashing: same fingerprint, same bits, same answers."""
    f = django_bloom.create_filter(
        "legacy", capacity=3000, error_rate=0.01, layout=layout, hasher="murmur3"
    )
    meta = f.meta
    assert meta.hasher == "murmur3" and not f.hasher.keyed
    text = f"django-bloom|1|{meta.num_bits}|{meta.num_hashes}|{meta.seed}|{layout}"
    assert f.layout.segment.fingerprint == (mmh3.hash(text.encode(), 0, signed=False) or 1)
    f.add_many(ITEMS[:1000])
    for item in ITEMS[1000:1100]:
        f.add(item)
    # the format-v1 scheme, computed from the seed alone (what the old code wrote)
    digests = b"".join(
        mmh3.hash_bytes(i.encode(), meta.seed, x64arch=True) for i in ITEMS[:1100]
    )  # mmh3_x64_128_digest does the same, but only from mmh3 4.1 on
    expected = layout_bitmap(bare_layout(layout, meta.num_bits, meta.num_hashes), digests)
    assert bitmap(redis_client, f) == expected
    assert all(get_filter("legacy", refresh=True).contains_many(ITEMS[:1100]))


def test_existing_rows_keep_murmur3_through_the_migration():
    migration = importlib.import_module("django_bloom.migrations.0005_keyed_hashing").Migration
    (add,) = migration.operations
    assert (add.name, add.field.default) == ("hasher", "murmur3")
    assert BloomFilter._meta.get_field("hasher").default == "murmur3"  # rows made by hand too
    assert hashers.identify_hasher("", 7).scheme == "murmur3"


def test_keyed_positions_depend_on_the_key_not_only_the_seed():
    a = django_bloom.create_filter("same-seed-a", capacity=100_000)
    b = django_bloom.create_filter("same-seed-b", capacity=100_000)
    BloomFilter.objects.filter(name="same-seed-b").update(seed=a.meta.seed)
    b = get_filter("same-seed-b", refresh=True)
    assert (a.meta.seed, a.meta.num_bits) == (b.meta.seed, b.meta.num_bits)
    pa = a.positions(a.hashes(ITEMS))
    pb = b.positions(b.hashes(ITEMS))
    # unrelated: about as many shared positions as two random draws (~k*n*k*n/m ~ 140)
    assert len(set(pa) & set(pb)) < 400
    assert sum(x == y for x, y in zip(pa, pb, strict=True)) < 10
    # and the same key gives the same positions (every process agrees)
    again = hashers.identify_hasher(a.meta.hasher, 0)
    assert again.item_digests(ITEMS) == a.hasher.item_digests(ITEMS)
    key = bytes.fromhex(key_hex(a.meta))
    assert again.digest(b"x") == hashlib.blake2b(b"x", key=key, digest_size=16).digest()


def test_keyed_numpy_and_pure_python_paths_agree():
    pytest.importorskip("numpy", reason="numpy is in the test extra; this must not skip in CI")
    hasher = hashers.identify_hasher(hashers.new_hasher_value(), 0)
    items = [f"n{i}" for i in range(20_000)] + [b"\x00bytes", 12345, "ünïcode"]
    digests = hasher.item_digests(items)
    assert digests == b"".join(hasher.digest(hashing.item_bytes(i)) for i in items)
    pairs = hashing.pairs_of(digests)
    for m, k, kind in [(287_552, 7, "standard"), (17, 2, "standard"), (64 * 4001, 3, "blocked")]:
        layout = bare_layout(kind, m, k)
        fast = layout_bitmap(layout, digests, use_numpy=True)
        assert fast == layout_bitmap(layout, digests, use_numpy=False)
        flat = hashing.positions_of(pairs, layout.positioner())
        assert layout.position_array(digests).tolist() == flat


@pytest.mark.parametrize("hasher", ["blake2b", "murmur3"])
@pytest.mark.parametrize("layout", ["standard", "blocked"])
def test_whole_api_for_both_schemes(redis_client, hasher, layout):
    f = django_bloom.create_filter(
        "api", capacity=3000, error_rate=0.01, layout=layout, hasher=hasher
    )
    assert f.hasher.scheme == hasher
    assert f.add("one") and not f.add("one")
    f.add_many(ITEMS[:1500])
    assert f.contains("one") and all(f.contains_many(ITEMS[:1500]))
    probes = ITEMS[::5] + [f"stranger-{i}" for i in range(2000)]
    batch = f.contains_many(probes)
    assert [f.contains(p) for p in probes] == batch
    by_add = bitmap(redis_client, f)
    f.rebuild(["one", *ITEMS[:1500]])  # bulk path: same bits
    assert bitmap(redis_client, f) == by_add
    assert f.meta.hasher == BloomFilter.objects.get(name="api").hasher  # rebuild keeps the key
    f.rebuild(ITEMS, capacity=6000)  # resize keeps the scheme and key
    assert get_filter("api", refresh=True).hasher.scheme == hasher
    assert all(get_filter("api").contains_many(ITEMS))


def test_single_operations_stay_one_round_trip_when_keyed(sent_commands):
    f = django_bloom.create_filter("wire", capacity=1000)
    sent_commands.clear()
    f.add("a")
    f.contains("a")
    f.add_many(ITEMS[:300])
    f.contains_many(ITEMS[:300])
    assert len(sent_commands) == 4


def test_a_row_with_another_key_cannot_read_the_bits_as_its_own():
    """The fingerprint names the key: a changed key is 'unavailable', never a false 'absent'."""
    f = django_bloom.create_filter("rekeyed", capacity=1000)
    f.add("kept")
    BloomFilter.objects.filter(name="rekeyed").update(hasher=hashers.new_hasher_value())
    g = get_filter("rekeyed", refresh=True)
    assert g.layout.segment.fingerprint != f.layout.segment.fingerprint
    with pytest.raises(FilterKeyMissing):
        g.contains("kept")


def test_unknown_hasher_is_refused_and_writes_nothing(redis_client, bloom_prefix):
    with pytest.raises(ValueError, match="unknown hasher"):
        django_bloom.create_filter("bad-hash", capacity=10, hasher="sha1")
    assert not BloomFilter.objects.filter(name="bad-hash").exists()
    assert not list(redis_client.scan_iter(match=f"{bloom_prefix}:*"))
    with pytest.raises(ValueError, match="hashing scheme"):
        hashers.identify_hasher("blake2b$nothex", 1)


def test_the_key_is_never_displayed(admin_client):
    f = django_bloom.create_filter("secret", capacity=1000)
    key = key_hex(f.meta)
    assert key not in repr(f) + repr(f.hasher) + str(f.meta)
    url = reverse("admin:django_bloom_bloomfilter_change", args=[f.meta.pk])
    html = admin_client.get(url).content.decode()
    assert "secret" in html and key not in html
    out = io.StringIO()
    call_command("bloom", "stats", "secret", "--json", stdout=out)
    assert "secret" in out.getvalue() and key not in out.getvalue()


def test_bloom_create_takes_the_hasher():
    out = io.StringIO()
    call_command("bloom", "create", "cli-legacy", "--capacity", "100", "--error-rate", "0.01",
                 "--hasher", "murmur3", stdout=out)  # fmt: skip
    assert "murmur3 hashing" in out.getvalue()
    assert BloomFilter.objects.get(name="cli-legacy").hasher == "murmur3"
    call_command("bloom", "create", "cli-keyed", "--capacity", "100", "--error-rate", "0.01",
                 stdout=out)  # fmt: skip
    assert BloomFilter.objects.get(name="cli-keyed").hasher.startswith("blake2b$")
