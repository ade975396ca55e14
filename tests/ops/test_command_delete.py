"""``bloom delete NAME`` (issue 24, item 5): Django's confirmation habit, every Redis key
of the filter gone with its row, a filter the settings still need refused; and ``bloom
rebuild NAME --capacity`` on a filter with no source says what to do instead."""

import io

import pytest
from django.core.management import CommandError, call_command
from django.test import override_settings
from django.urls import reverse

import django_bloom
from django_bloom import counters
from django_bloom.models import BloomFilter
from django_bloom.services import forget_filters

pytestmark = pytest.mark.django_db


def bloom(*args, **options):
    out = io.StringIO()
    call_command("bloom", *args, stdout=out, stderr=io.StringIO(), **options)
    return out.getvalue()


def error_of(*args, **options) -> CommandError:
    with pytest.raises(CommandError) as info:
        bloom(*args, **options)
    return info.value


def keys_of(redis_client, prefix, name):
    return sorted(
        key.decode()
        for key in redis_client.scan_iter(match=f"{prefix}:*", count=1000)
        if name in key.decode()
    )


def filled(name, **kwargs):
    f = django_bloom.create_filter(name, capacity=kwargs.pop("capacity", 100), **kwargs)
    if not f.meta.family:
        f.add_many([f"{name}-{i}" for i in range(300)])
    return f


KINDS = {
    "plain": {},
    "blocked-one": {"layout": "blocked"},
    "counting-one": {"layout": "counting"},
    "sharded-one": {"layout": "sharded", "options": {"segments": 3}},
    "rotating-one": {"layout": "rotating", "options": {"slices": 3, "slice_seconds": 60}},
    "scalable-one": {"layout": "scalable"},  # 300 items into 100: it grows sub-filters
}


@pytest.mark.parametrize("name", sorted(KINDS))
def test_delete_removes_the_row_and_every_key(name, redis_client, bloom_prefix):
    f = filled(name, **KINDS[name])
    counters.record(f, "db_skipped")
    counters.flush()  # the validator counters' hash exists too
    counters.record(f, "db_confirmed")  # and a count still pending in this process
    before = keys_of(redis_client, bloom_prefix, name)
    assert f.counters_segment.keys.counters in before and len(before) > 1
    out = bloom("delete", name, "--noinput")
    assert out.strip() == f"Deleted {name!r}."
    assert not BloomFilter.objects.filter(name=name).exists()
    counters.flush()  # the pending count must not bring its key back
    assert keys_of(redis_client, bloom_prefix, name) == []


def test_delete_a_family_removes_its_control_and_member_keys(redis_client, bloom_prefix):
    django_bloom.create_filter("pushed", capacity=100, family=True)
    for member in (1, 2, 3):
        django_bloom.get_filter("pushed", member=member).add("article-7")
    assert len(keys_of(redis_client, bloom_prefix, "pushed")) >= 4
    assert bloom("delete", "pushed", "--no-input").strip() == "Deleted 'pushed' (3 member key(s))."
    assert keys_of(redis_client, bloom_prefix, "pushed") == []
    assert not BloomFilter.objects.filter(name="pushed").exists()


def test_delete_asks_and_only_yes_deletes(monkeypatch, redis_client, bloom_prefix):
    filled("asked")
    prompts = []
    for answer in ("no", "y", ""):
        monkeypatch.setattr("builtins.input", lambda prompt, a=answer: prompts.append(prompt) or a)
        exc = error_of("delete", "asked")
        assert exc.returncode == 1 and "nothing was deleted" in str(exc)
    assert "'asked'" in prompts[0] and "Type 'yes' to continue, or 'no' to cancel" in prompts[0]
    assert BloomFilter.objects.filter(name="asked").exists()
    assert keys_of(redis_client, bloom_prefix, "asked")
    monkeypatch.setattr("builtins.input", lambda prompt: "yes")
    assert bloom("delete", "asked").strip() == "Deleted 'asked'."
    assert keys_of(redis_client, bloom_prefix, "asked") == []


def test_a_run_nobody_can_answer_deletes_nothing_without_noinput(monkeypatch):
    filled("cron")

    def closed(prompt):
        raise EOFError

    monkeypatch.setattr("builtins.input", closed)
    exc = error_of("delete", "cron")
    assert exc.returncode == 1 and "bloom delete cron --noinput" in str(exc)
    monkeypatch.undo()  # pytest's own stdin: reading it raises OSError, as a closed one would
    assert error_of("delete", "cron").returncode == 1
    assert BloomFilter.objects.filter(name="cron").exists()


def test_a_filter_bound_in_settings_is_refused(monkeypatch, bloom_prefix, redis_client):
    monkeypatch.setattr("builtins.input", lambda prompt: pytest.fail("must not ask"))
    django_bloom.create_filter("emails", capacity=100, source="testapp.Account.email")
    spec = {"source": "testapp.Account.email", "normalizer": "email_ci"}
    with override_settings(DJANGO_BLOOM={"KEY_PREFIX": bloom_prefix, "BINDINGS": {"emails": spec}}):
        exc = error_of("delete", "emails", "--noinput")
    assert exc.returncode == 2
    assert "refusing to delete filter 'emails'" in str(exc) and "BINDINGS" in str(exc)
    assert BloomFilter.objects.filter(name="emails").exists()
    assert keys_of(redis_client, bloom_prefix, "emails")
    # once the settings no longer name it, it goes
    assert bloom("delete", "emails", "--noinput").strip() == "Deleted 'emails'."


def test_the_blocklist_the_middleware_checks_is_refused(settings):
    from django_bloom import ipblock

    ipblock.block("203.0.113.0/24")
    settings.MIDDLEWARE = ["django_bloom.middleware.BlocklistMiddleware", *settings.MIDDLEWARE]
    exc = error_of("delete", "ip-blocklist", "--noinput")
    assert exc.returncode == 2 and "BlocklistMiddleware" in str(exc)
    assert BloomFilter.objects.filter(name="ip-blocklist").exists()


def test_unknown_filter_and_redis_down_are_errors_that_delete_nothing():
    exc = error_of("delete", "nope", "--noinput")
    assert exc.returncode == 2 and "no Bloom filter named 'nope'" in str(exc)
    filled("downed")
    BloomFilter.objects.filter(name="downed").update(cache_alias="dead")
    forget_filters()
    assert error_of("delete", "downed", "--noinput").returncode == 2
    assert BloomFilter.objects.filter(name="downed").exists()


def test_the_admins_delete_takes_the_same_path(admin_client, redis_client, bloom_prefix):
    f = filled("grown", layout="scalable")
    assert len(keys_of(redis_client, bloom_prefix, "grown")) > 1  # sub-filters
    response = admin_client.post(
        reverse("admin:django_bloom_bloomfilter_delete", args=[f.meta.pk]), {"post": "yes"}
    )
    assert response.status_code == 302
    assert keys_of(redis_client, bloom_prefix, "grown") == []


def test_rebuild_with_capacity_and_no_source_says_what_to_do_instead():
    filled("app-fed")
    exc = error_of("rebuild", "app-fed", "--capacity", "10000")
    message = str(exc)
    assert exc.returncode == 2 and "no bound source" in message
    assert "bloom create NEW --capacity N" in message and "bloom delete app-fed" in message
    assert "Filter.rebuild(items, capacity=N)" in message and "--layout scalable" in message
    assert BloomFilter.objects.get(name="app-fed").capacity == 100  # nothing changed
