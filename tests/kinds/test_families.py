"""Filter families: many small filters from one row (issue 14), on the real Redis."""

import io
import json
import re
import time

import pytest
from django.core.management import CommandError, call_command

import django_bloom
from django_bloom import services
from django_bloom.engine.kinds.family import layout as engine_family
from django_bloom.exceptions import FamilyMisuse, FilterKeyMissing, OperationNotSupported

pytestmark = pytest.mark.django_db


def member_keys(redis_client, prefix, name="pushed"):
    return sorted(
        k.decode() for k in redis_client.scan_iter(match=f"{prefix}:{{{name}:m:*", count=1000)
    )


@pytest.fixture
def pushed():
    return django_bloom.create_filter(
        "pushed", capacity=1000, error_rate=0.01, family=True, member_ttl=30 * 86400
    )


def test_members_are_independent(pushed):
    alice = django_bloom.get_filter("pushed", member=42)
    bob = django_bloom.get_filter("pushed", member="bob")
    assert alice.add("article-1") is True
    assert alice.add("article-1") is False
    assert alice.contains("article-1")
    assert not bob.contains("article-1")
    assert bob.add_many(["article-2", "article-3"]) == [True, True]
    assert alice.contains_many(["article-1", "article-2", "article-3"]) == [True, False, False]
    assert bob.contains_many(["article-1", "article-2", "article-3"]) == [False, True, True]
    # 42 and "42" are the same member
    assert django_bloom.get_filter("pushed", member="42").contains("article-1")


def test_first_write_creates_the_key_with_ttl(pushed, redis_client, bloom_prefix):
    member = django_bloom.get_filter("pushed", member=7)
    assert member_keys(redis_client, bloom_prefix) == []
    assert not member.contains("x")  # never written: absent, and still no key
    assert member_keys(redis_client, bloom_prefix) == []
    member.add("x")
    [key] = member_keys(redis_client, bloom_prefix)
    assert key.startswith(f"{bloom_prefix}:{{pushed:m:7}}:v1:")
    assert redis_client.strlen(key) == member.key_bytes
    assert 30 * 86400 - 60 < redis_client.ttl(key) <= 30 * 86400


def test_member_write_and_read_are_one_round_trip(pushed, sent_commands):
    member = django_bloom.get_filter("pushed", member=1)
    member.add("warm-up")  # loads the script on this server if needed
    sent_commands.clear()
    member.add("a")
    member.contains("a")
    member.add_many(["b", "c", "d"])
    member.contains_many(["b", "c", "zz"])
    assert len(sent_commands) == 4


def test_ttl_is_refreshed_by_every_write(pushed, redis_client, bloom_prefix):
    member = django_bloom.get_filter("pushed", member="carol")
    member.add("first")
    [key] = member_keys(redis_client, bloom_prefix)
    redis_client.expire(key, 100)
    member.contains("first")  # a read does not refresh it
    assert redis_client.ttl(key) <= 100
    member.add("second")
    assert redis_client.ttl(key) > 100


def test_member_expires_and_then_reads_absent_by_design(redis_client, bloom_prefix):
    django_bloom.create_filter("short", capacity=100, family=True, member_ttl=1)
    member = django_bloom.get_filter("short", member="u1")
    member.add("item")
    assert member.contains("item")
    deadline = time.monotonic() + 10
    while member_keys(redis_client, bloom_prefix, "short") and time.monotonic() < deadline:
        time.sleep(0.1)
    assert member_keys(redis_client, bloom_prefix, "short") == []
    assert member.contains("item") is False  # expired: absent by design (documented)
    assert member.add("item") is True  # and a new write starts it afresh


def test_family_without_ttl_never_expires(redis_client, bloom_prefix):
    django_bloom.create_filter("forever", capacity=100, family=True)
    django_bloom.get_filter("forever", member=1).add("x")
    [key] = member_keys(redis_client, bloom_prefix, "forever")
    assert redis_client.ttl(key) == -1


def test_a_foreign_key_at_a_member_name_is_not_read(pushed, redis_client, bloom_prefix):
    member = django_bloom.get_filter("pushed", member=5)
    redis_client.set(member.identity[0], b"\x00" * 10)
    with pytest.raises(FilterKeyMissing):
        member.contains("x")
    with pytest.raises(FilterKeyMissing):
        member.add("x")


@pytest.mark.parametrize(
    "bad, error",
    [
        (None, FamilyMisuse),  # no member on a family
        ("", ValueError),
        ("x" * 201, ValueError),
        (True, TypeError),
        (4.5, TypeError),
        (b"bytes", TypeError),
        ("\udc80", ValueError),
    ],
)
def test_bad_member_is_refused_and_writes_nothing(pushed, redis_client, bloom_prefix, bad, error):
    before = sorted(redis_client.scan_iter(match=f"{bloom_prefix}:*"))
    with pytest.raises(error):
        django_bloom.get_filter("pushed", member=bad).add("x")
    assert sorted(redis_client.scan_iter(match=f"{bloom_prefix}:*")) == before


def test_family_misuse_is_a_clear_error(pushed):
    django_bloom.create_filter("plain", capacity=100)
    with pytest.raises(FamilyMisuse, match="member="):
        django_bloom.get_filter("pushed")
    with pytest.raises(FamilyMisuse, match="not a filter family"):
        django_bloom.get_filter("plain", member=1)
    with pytest.raises(FamilyMisuse):
        services.get_family("plain")
    with pytest.raises(ValueError, match="member_ttl"):
        django_bloom.create_filter("nope", capacity=100, member_ttl=60)
    with pytest.raises(ValueError, match="generic"):
        django_bloom.create_filter("nope", capacity=100, family=True, kind="unique")
    assert not services.BloomFilter.objects.filter(name="nope").exists()


def test_members_with_odd_characters_get_distinct_safe_keys(pushed, redis_client, bloom_prefix):
    odd = ["a}b", "a{b", "a*b", "a:b", "a%7Db", "tenant acme", "ünï"]
    for i, name in enumerate(odd):
        django_bloom.get_filter("pushed", member=name).add(f"item-{i}")
    keys = member_keys(redis_client, bloom_prefix)
    assert len(keys) == len(odd)
    for key in keys:
        tag = key[key.index("{") + 1 : key.index("}")]
        assert re.fullmatch(r"pushed:m:[A-Za-z0-9%_.~-]+", tag), tag
    for i, name in enumerate(odd):
        found = django_bloom.get_filter("pushed", member=name).contains_many(
            [f"item-{j}" for j in range(len(odd))]
        )
        assert found[i] and sum(found) == 1
    assert sorted(services.get_family("pushed").members()) == sorted(odd)


def test_delete_removes_every_member_key(pushed, redis_client, bloom_prefix):
    for user in range(2500):  # more than one SCAN/UNLINK batch
        redis_client.set(f"{bloom_prefix}:{{pushed:m:{user}}}:v1:x:bits", b"")
    django_bloom.get_filter("pushed", member="real").add("x")
    django_bloom.create_filter("pushed2", capacity=10, family=True)  # a neighbour stays
    django_bloom.get_filter("pushed2", member=1).add("x")
    removed = services.get_family("pushed").delete()
    assert removed == 2501
    assert member_keys(redis_client, bloom_prefix) == []
    assert list(redis_client.scan_iter(match=f"{bloom_prefix}:{{pushed}}*")) == []
    assert not services.BloomFilter.objects.filter(name="pushed").exists()
    assert django_bloom.get_filter("pushed2", member=1).contains("x")


def test_clear_empties_every_member_and_keeps_the_family(pushed):
    for user in range(5):
        django_bloom.get_filter("pushed", member=user).add("x")
    assert services.get_family("pushed").clear() == 5
    for user in range(5):
        assert not django_bloom.get_filter("pushed", member=user).contains("x")
    assert django_bloom.get_filter("pushed", member=1).add("x") is True


def test_member_clear_and_delete_touch_that_member_only(pushed):
    a = django_bloom.get_filter("pushed", member="a")
    b = django_bloom.get_filter("pushed", member="b")
    a.add("x"), b.add("x")
    a.clear()
    assert not a.contains("x") and b.contains("x")
    b.delete()
    assert not b.contains("x")
    assert services.BloomFilter.objects.filter(name="pushed").exists()


def test_member_rebuild_is_refused(pushed):
    with pytest.raises(OperationNotSupported, match="cannot be rebuilt"):
        django_bloom.get_filter("pushed", member=1).rebuild(["x"])


def test_member_and_family_stats(pushed):
    member = django_bloom.get_filter("pushed", member=9)
    empty = member.stats()
    assert empty.bits_set == 0 and empty.memory_bytes is None
    member.add_many([f"a{i}" for i in range(50)])
    django_bloom.get_filter("pushed", member=10).add("b")
    stats = member.stats()
    assert 45 <= stats.estimated_items <= 55
    assert stats.memory_bytes >= member.key_bytes
    family = services.get_family("pushed").stats()
    assert family.members == 2 and family.members_complete and family.control_present
    assert family.memory_bytes >= 2 * member.key_bytes
    assert family.member_ttl == 30 * 86400


def test_member_handles_are_cached_but_bounded(pushed, monkeypatch):
    from django_bloom import family

    monkeypatch.setattr(family, "MAX_MEMBER_HANDLES", 3)
    first = django_bloom.get_filter("pushed", member=1)
    assert django_bloom.get_filter("pushed", member="1") is first
    for user in range(2, 10):
        django_bloom.get_filter("pushed", member=user)
    assert len(services.get_family("pushed")._handles) == 3
    assert django_bloom.get_filter("pushed", member=1) is not first


def test_member_token_is_injective():
    tokens = {engine_family.member_token(m) for m in ["a%b", "a%25b", "a b", "a+b", "a/b", 7, "8"]}
    assert len(tokens) == 7


# -- bloom commands -----------------------------------------------------------------
def bloom(*args, **options):
    out, err = io.StringIO(), io.StringIO()
    call_command("bloom", *args, stdout=out, stderr=err, **options)
    return out.getvalue()


def bloom_error(*args) -> CommandError:
    with pytest.raises(CommandError) as info:
        bloom(*args)
    assert info.value.returncode == 2
    return info.value


def test_bloom_commands_with_member(redis_client, bloom_prefix):
    out = bloom("create", "pushed", "--capacity", "1000", "--family", "--member-ttl", "30d")
    assert "filter family 'pushed'" in out and "2,592,000 s" in out
    assert "2 new" in bloom("add", "pushed", "a1", "a2", "--member", "42")
    assert bloom("check", "pushed", "a1", "--member", "42").strip() == "maybe present"
    with pytest.raises(SystemExit) as absent:
        bloom("check", "pushed", "a1", "--member", "43")
    assert absent.value.code == 1
    assert "--member" in str(bloom_error("check", "pushed", "a1"))
    assert "--member" in str(bloom_error("add", "pushed", "a1"))
    bloom("create", "plain", "--capacity", "10")
    assert "drop --member" in str(bloom_error("check", "plain", "x", "--member", "1"))
    assert "at most 200" in str(bloom_error("add", "pushed", "x", "--member", "m" * 201))
    assert member_keys(redis_client, bloom_prefix) == [
        f"{bloom_prefix}:{{pushed:m:42}}:v1:{services.get_family('pushed').meta.generation}:bits"
    ]

    bloom("add", "pushed", "b1", "--member", "bob")
    table = bloom("stats", "pushed")
    assert "family" in table and "2 members" in table
    assert "filter family, 2 member(s)" in table and "expires 30d after its last write" in table
    [entry] = json.loads(bloom("stats", "pushed", "--json"))
    assert entry["members"] == 2 and entry["memory_bytes"] > 0 and entry["state"] == "ok"
    everything = bloom("stats")  # all filters: the family is one row, not an error
    assert "2 members" in everything and "plain" in everything
    [one] = json.loads(bloom("stats", "pushed", "--member", "42", "--json"))
    assert one["member"] == "42" and one["bits_set"] > 0
    assert "pushed[42]" in bloom("stats", "pushed", "--member", "42")

    assert "member '42'" in bloom("clear", "pushed", "--member", "42", "--yes")
    assert django_bloom.get_filter("pushed", member="bob").contains("b1")
    assert "1 member key(s) removed" in bloom("clear", "pushed", "--yes")
    assert member_keys(redis_client, bloom_prefix) == []


def test_stats_reports_a_lost_family_and_exits_2(redis_client, bloom_prefix):
    django_bloom.create_filter("pushed", capacity=100, family=True)
    redis_client.delete(services.get_family("pushed").control_key)
    out = io.StringIO()
    with pytest.raises(CommandError):
        call_command("bloom", "stats", "pushed", stdout=out)
    assert "LOST" in out.getvalue()


def test_a_second_process_writes_members(django_process, redis_client, bloom_prefix):
    def done(proc):
        out, err = proc.communicate(timeout=120)
        assert proc.returncode in (0, 1), err
        return proc.returncode, out

    done(django_process("migrate", "-v", "0"))
    done(django_process("bloom", "create", "seen", "--capacity", "500", "--family",
                        "--member-ttl", "3600"))  # fmt: skip
    script = (
        "import django_bloom\n"
        "for user in range(20):\n"
        "    django_bloom.get_filter('seen', member=user).add_many([f'{W}-{user}', 'shared'])\n"
    )
    writers = [django_process("shell", "-c", script.replace("{W}", w)) for w in ("p", "q")]
    for proc in writers:
        done(proc)
    assert len(member_keys(redis_client, bloom_prefix, "seen")) == 20
    for key in member_keys(redis_client, bloom_prefix, "seen"):
        assert 3500 < redis_client.ttl(key) <= 3600
    assert done(django_process("bloom", "check", "seen", "p-7", "--member", "7"))[0] == 0
    assert done(django_process("bloom", "check", "seen", "q-7", "--member", "7"))[0] == 0
    assert done(django_process("bloom", "check", "seen", "p-7", "--member", "8"))[0] == 1
    code, out = done(django_process("bloom", "stats", "seen", "--json"))
    assert json.loads(out)[0]["members"] == 20


# -- admin ----------------------------------------------------------------------------
@pytest.fixture
def fresh_family_stats():
    from django_bloom.ops import monitoring

    monitoring.forget_stats()
    yield
    monitoring.forget_stats()


def test_admin_lists_a_family_as_one_row_with_members_and_memory(
    admin_client, pushed, fresh_family_stats
):
    from django.urls import reverse

    django_bloom.create_filter("plain", capacity=1000)
    for user in range(3):
        django_bloom.get_filter("pushed", member=user).add("article")
    html = admin_client.get(reverse("admin:django_bloom_bloomfilter_changelist")).content.decode()
    assert html.count('class="field-name"') == 2  # the family is one row, not three
    row = html[html.index(">pushed<") :]
    row = row[: row.index("</tr>")]
    assert "3 members" in row and "1,000 items each" in row
    assert "target 1 in 100 per member" in row
    assert re.search(r"\d+(\.\d+)? KiB", row), row  # ~3 x 1.2 KiB keys
    assert "unavailable" not in row


def test_admin_change_page_shows_family_figures(admin_client, pushed, fresh_family_stats):
    from django.urls import reverse

    for user in range(4):
        django_bloom.get_filter("pushed", member=user).add("article")
    url = reverse("admin:django_bloom_bloomfilter_change", args=[pushed.meta.pk])
    html = admin_client.get(url).content.decode()
    assert 'id="bloom-family"' in html and 'id="bloom-capacity"' not in html
    assert "4 members" in html
    assert "30 days after its last write" in html
    assert "estimated from 4 sampled members" in html
    assert "MISSING" not in html


def test_admin_delete_and_clear_a_family(admin_client, pushed, redis_client, bloom_prefix):
    from django.urls import reverse

    for user in range(3):
        django_bloom.get_filter("pushed", member=user).add("article")
    changelist = reverse("admin:django_bloom_bloomfilter_changelist")
    admin_client.post(
        changelist,
        {"action": "clear_filters", "_selected_action": [pushed.meta.pk], "confirm": "yes"},
    )
    assert member_keys(redis_client, bloom_prefix) == []
    django_bloom.get_filter("pushed", member=1).add("article")
    url = reverse("admin:django_bloom_bloomfilter_delete", args=[pushed.meta.pk])
    admin_client.post(url, {"post": "yes"})
    assert not services.BloomFilter.objects.filter(name="pushed").exists()
    assert list(redis_client.scan_iter(match=f"{bloom_prefix}:*")) == []


# -- system checks ----------------------------------------------------------------------
def test_check_a_family_is_not_a_missing_key_but_a_lost_control_key_is(pushed, redis_client):
    from django_bloom import checks

    django_bloom.get_filter("pushed", member=1).add("x")
    assert checks.check_filters(databases=["default"]) == []  # no bitmap of its own: fine
    redis_client.delete(pushed.control_key)
    found = checks.check_filters(databases=["default"])
    assert [(m.id, m.obj) for m in found] == [("django_bloom.W014", "BloomFilter 'pushed'")]


def test_check_warns_that_volatile_policies_evict_members_with_a_ttl(private_redis):
    import redis
    from django.test import override_settings

    from django_bloom import checks
    from tests.conftest import caches_with

    location = private_redis("--maxmemory-policy", "volatile-lru")
    with override_settings(CACHES=caches_with("other", location)):
        django_bloom.create_filter("forever", capacity=10, family=True, cache_alias="other")
        assert checks.check_redis(databases=["default"]) == []  # no TTL: not evictable
        django_bloom.create_filter(
            "pushed", capacity=10, family=True, member_ttl=60, cache_alias="other"
        )
        found = checks.check_redis(databases=["default"])
        assert [(m.id, m.obj) for m in found] == [("django_bloom.W015", "other")]
        redis.Redis.from_url(location).config_set("maxmemory-policy", "noeviction")
        assert checks.check_redis(databases=["default"]) == []


# -- a real restart without persistence ---------------------------------------------------
def test_restarted_empty_redis_makes_members_raise_never_absent(redis_server, cache_alias):
    from django_bloom.exceptions import FilterUnavailable

    server = redis_server()
    alias = cache_alias("own", server.url)
    django_bloom.create_filter("pushed", capacity=1000, family=True, cache_alias=alias)
    written = django_bloom.get_filter("pushed", member=1)
    written.add("article")
    assert written.contains("article")
    port = server.port
    server.kill()
    with pytest.raises(FilterUnavailable):  # unreachable: an error, never "absent"
        written.contains("article")
    redis_server(port=port)  # back, empty (no persistence)
    deadline = time.monotonic() + 15
    while True:
        try:
            written.contains("article")
        except FilterKeyMissing:
            break  # Redis answers, and the lost family is noticed
        except FilterUnavailable:
            assert time.monotonic() < deadline, "Redis did not come back"
            time.sleep(0.1)
        else:
            pytest.fail("a member of a lost family answered")
    with pytest.raises(FilterKeyMissing):
        django_bloom.get_filter("pushed", member=2).contains("article")
    with pytest.raises(FilterKeyMissing):
        written.add("article")


def test_admin_creates_a_family(admin_client, redis_client, bloom_prefix):
    from django.urls import reverse

    from tests.admin.test_admin import filter_form

    url = reverse("admin:django_bloom_bloomfilter_add")
    assert 'name="make_family"' in admin_client.get(url).content.decode()
    refused = admin_client.post(
        url, filter_form(name="bad", kind="unique", make_family="on", member_ttl_seconds="60")
    )
    assert refused.status_code == 200 and "kind &#x27;generic&#x27;" in refused.content.decode()
    refused = admin_client.post(url, filter_form(name="bad", member_ttl_seconds="60"))
    assert refused.status_code == 200 and "pass family=True too" in refused.content.decode()
    assert not services.BloomFilter.objects.filter(name="bad").exists()
    made = admin_client.post(
        url, filter_form(name="pushed", make_family="on", member_ttl_seconds="3600")
    )
    assert made.status_code == 302
    row = services.BloomFilter.objects.get(name="pushed")
    assert row.family and row.member_ttl == 3600
    assert redis_client.exists(services.get_family("pushed").control_key)
    django_bloom.get_filter("pushed", member=1).add("x")
    [key] = member_keys(redis_client, bloom_prefix)
    assert 3500 < redis_client.ttl(key) <= 3600
