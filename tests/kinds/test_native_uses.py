"""Layout ``native`` where filters are used: verify, the validator and guard, the
blocklist middleware, stats and admin, the async API, ``bloom`` commands, system checks
(the ``redisbloom`` fixtures: see tests/kinds/test_native.py)."""

import contextlib
import io

import pytest
from django.test import override_settings

import django_bloom
from django_bloom.engine.kinds.native.commands import RedisBloomMissing
from django_bloom.models import BloomFilter
from tests.kinds.test_native import ITEMS

pytestmark = pytest.mark.django_db


# -- what uses filters: verify, validator, guard, middleware, stats, admin, async ------
def restore_snapshot(bf, key, chunks):
    """Put back a BF.SCANDUMP taken earlier, as a restore of an old RDB file would."""
    bf.delete(key)
    for iterator, data in chunks:
        bf.execute_command("BF.LOADCHUNK", key, iterator, data)


def snapshot(bf, key):
    chunks, iterator = [], 0
    while True:
        iterator, data = bf.execute_command("BF.SCANDUMP", key, iterator)
        if iterator == 0:
            return chunks
        chunks.append((iterator, data))


def test_bloom_verify_says_which_source_items_answer_absent(native, bf):
    """(The contract: verify asks a VerifiedByItems kind for every source item and repairs.)
    Here the command's words, after a restore of an old snapshot lost 200 writes."""
    from django.core.management import call_command

    from tests.testapp.models import Account

    names = [f"user{i}" for i in range(1200)]
    Account.objects.bulk_create(Account(username=n, email=f"{n}@example.org") for n in names)
    f = native("usernames", source="testapp.Account.username")
    f.rebuild(names[:1000])
    old = snapshot(bf, f.layout.segment.keys.bits)
    f.add_many(names[1000:])
    restore_snapshot(bf, f.layout.segment.keys.bits, old)  # the last 200 writes are lost
    out = io.StringIO()
    with pytest.raises(SystemExit):
        call_command("bloom", "verify", "usernames", stdout=out)
    assert "answer 'absent'" in out.getvalue() and "--repair" in out.getvalue()
    with pytest.raises(SystemExit):  # exit 1: bits were missing (now repaired)
        call_command("bloom", "verify", "usernames", "--repair", stdout=out)
    assert "added them again" in out.getvalue() and all(f.contains_many(names))


@contextlib.contextmanager
def native_binding(prefix, alias, name, spec):
    """A BINDINGS entry whose filter is native (bindings create standard ones)."""
    from django.db.models.signals import post_delete, post_save

    from django_bloom.unique import sync
    from tests.testapp.models import Account

    django_bloom.create_filter(
        name, capacity=spec["capacity"], layout="native", cache_alias=alias,
        kind="unique", source=spec["source"], normalizer=spec.get("normalizer", ""),
    )  # fmt: skip
    with override_settings(DJANGO_BLOOM={"KEY_PREFIX": prefix, "BINDINGS": {name: spec}}):
        sync.connect_bindings()
        try:
            yield django_bloom.get_filter(name)
        finally:
            for signal in (post_save, post_delete):
                signal.disconnect(sender=Account, dispatch_uid=f"django_bloom.unique.sync:{name}")


@pytest.mark.django_db(transaction=True)  # the binding adds on commit
def test_the_validator_and_the_guard_answer_from_a_native_filter(
    redisbloom, bf, bloom_prefix, django_assert_num_queries
):
    from django.core.exceptions import ValidationError

    from django_bloom.guard import certainly_absent
    from django_bloom.validators import BloomUniqueValidator
    from tests.testapp.models import Account

    spec = {"source": "testapp.Account.username", "normalizer": "username", "capacity": 1000}
    with native_binding(bloom_prefix, redisbloom, "handles", spec) as handle:
        Account.objects.create(username="Alice", email="alice@example.org")
        assert handle.contains("alice")
        validator = BloomUniqueValidator("handles", "testapp.Account", "username")
        with pytest.raises(ValidationError):
            validator("ALICE")
        with django_assert_num_queries(0):
            validator("bob")  # certainly absent: no query
            assert certainly_absent("handles", "mallory") is True
        assert certainly_absent("handles", "alice") is False
        bf.delete(handle.layout.segment.keys.bits)  # a lost key: the database decides
        with pytest.raises(ValidationError):
            validator("alice")
        validator("bob")
        assert certainly_absent("handles", "mallory") is False


def test_the_blocklist_middleware_blocks_from_a_native_filter(native, settings, client):
    from django_bloom import ipblock as blocklist

    native("ip-blocklist", capacity=1000, error_rate=0.0001, kind="blocklist")
    settings.MIDDLEWARE = ["django_bloom.middleware.BlocklistMiddleware", *settings.MIDDLEWARE]
    blocklist.block("203.0.113.0/24")
    assert client.get("/", REMOTE_ADDR="203.0.113.7").status_code == 403
    assert client.get("/", REMOTE_ADDR="198.51.100.7").status_code == 200
    assert blocklist.rebuild_blocklist() == 1  # rebuilt from its BlockedEntry rows
    assert client.get("/", REMOTE_ADDR="203.0.113.8").status_code == 403


def test_stats_and_the_admin_pages_show_a_native_filter(native, admin_client):
    f = native("shown", capacity=5000, options={"raw_items": True})
    f.add_many(ITEMS[:1000] + ITEMS[:10])
    stats = f.stats()
    # Raw items: RedisBloom's fixed-seed hashing, the same on every run (no false positive).
    assert stats.estimated_items == 1000 and stats.details["items_inserted"] == 1000
    assert stats.capacity == 5000 and stats.num_bits == f.meta.num_bits
    assert 0.1 < stats.fill_ratio < 0.2 and stats.current_fpr < 0.01
    assert stats.details["items_sent"] == "raw items" and not stats.details["full"]
    assert stats.memory_bytes > f.meta.num_bits // 8
    changelist = admin_client.get("/admin/django_bloom/bloomfilter/")
    assert changelist.status_code == 200 and b"shown" in changelist.content
    page = admin_client.get(f"/admin/django_bloom/bloomfilter/{f.meta.pk}/change/")
    assert page.status_code == 200 and b"native" in page.content


def test_bloom_create_and_stats_commands(redisbloom, bloom_prefix):
    from django.core.management import call_command

    out = io.StringIO()
    call_command(
        "bloom", "create", "cli", "--capacity", "1000", "--layout", "native",
        "--option", "raw_items=true", "--cache-alias", redisbloom, stdout=out,
    )  # fmt: skip
    f = django_bloom.get_filter("cli")
    assert f.meta.layout == "native" and f.meta.options == {"raw_items": True}
    f.add("x")
    call_command("bloom", "stats", "cli", stdout=out)
    assert "cli" in out.getvalue()


# -- system checks ------------------------------------------------------------------------
def test_e006_flags_native_filters_on_a_redis_without_the_module(bloom_prefix, redis_client):
    from django_bloom import checks

    row = BloomFilter(name="orphan", capacity=1000, error_rate=0.01, layout="native")
    row.derive_geometry()
    row.save()  # as if the module had been there when it was made
    found = [m for m in checks.check_redis(databases=["default"]) if m.id.endswith("E006")]
    assert [(m.id, m.obj) for m in found] == [("django_bloom.E006", "default")]
    assert "'orphan'" in found[0].msg
    assert checks.check_filters(databases=["default"]) == []  # unavailable, never a crash
    lost = django_bloom.create_filter("zzz-lost", capacity=100)  # after it, same Redis
    redis_client.delete(lost.layout.segment.keys.bits)
    found = [(m.id, m.obj) for m in checks.check_filters(databases=["default"])]
    assert found == [("django_bloom.W005", "BloomFilter 'zzz-lost'")]  # still checked
    with pytest.raises(RedisBloomMissing):
        django_bloom.get_filter("orphan").contains("x")


def test_i002_offers_the_native_layout_where_the_module_is(redisbloom, bloom_prefix):
    from django_bloom import checks

    django_bloom.create_filter("small", capacity=1000, cache_alias=redisbloom)
    assert not [m for m in checks.check_redis(databases=["default"]) if m.id.endswith("I002")]
    django_bloom.create_filter("big", capacity=200_000, cache_alias=redisbloom)
    django_bloom.create_filter("big-here", capacity=200_000)  # the default Redis: no module
    found = [m for m in checks.check_redis(databases=["default"]) if m.id.endswith("I002")]
    assert [(m.id, m.obj) for m in found] == [("django_bloom.I002", redisbloom)]
    assert "'big'" in found[0].msg and "small" not in found[0].msg


def test_e006_and_i002_ask_the_kind_never_its_name(redisbloom, bloom_prefix):
    """E006 flags a kind that needs something of its server (``ServerChecked``) where the
    server lacks it; I002 offers layout native for big plain filters (``FamilyTemplate``:
    k bits in one bitmap, what a RedisBloom key holds), whatever the kinds are named."""
    from django_bloom import checks
    from django_bloom.engine.kinds import StandardLayout, register_layout, unregister_layout
    from django_bloom.engine.kinds.capabilities import ServerChecked

    class Plain(StandardLayout):
        layout_name = "test-plain"

    class Picky(StandardLayout, ServerChecked):
        layout_name = "test-picky"

        @classmethod
        def check_server(cls, storage):
            raise ValueError("this server lacks the picky module")

    for kind in (Plain, Picky):
        register_layout(kind)
    try:
        kw = {"layout": "test-plain", "cache_alias": redisbloom}
        django_bloom.create_filter("big-plain", capacity=200_000, **kw)
        row = BloomFilter(name="picky", capacity=100, error_rate=0.01, layout="test-picky")
        row.derive_geometry()
        row.save()  # as if the server had had the module when it was made
        found = {m.id[-4:]: m.msg for m in checks.check_redis(databases=["default"])}
    finally:
        unregister_layout("test-plain")
        unregister_layout("test-picky")
    assert "'big-plain'" in found["I002"]
    assert "'picky'" in found["E006"] and "lacks the picky module" in found["E006"]


def test_the_admin_add_form_refuses_native_without_the_module_and_creates_it_with(
    admin_client, redisbloom, bf
):
    from tests.kinds.test_layout_protocol import admin_add

    resp = admin_add(admin_client, layout="native", cache_alias="default")
    assert resp.status_code == 200 and "no RedisBloom" in resp.content.decode()
    assert not BloomFilter.objects.filter(name="via-admin").exists()
    resp = admin_add(admin_client, layout="native", cache_alias=redisbloom)
    assert resp.status_code == 302, resp.content.decode()[:2000]
    f = django_bloom.get_filter("via-admin")
    assert f.meta.layout == "native" and bf.type(f.layout.segment.keys.bits) == b"MBbloom--"
