"""Admin pages: figures, chart, actions with permissions, blocklist upload."""

import re
import threading

import pytest
from django.contrib.auth.models import Permission, User
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse

import django_bloom
from django_bloom.admin import actions as admin_actions
from django_bloom.engine.kinds import layout_class
from django_bloom.models import BlockedEntry, BloomFilter, FilterSnapshot
from django_bloom.ops import monitoring
from tests.testapp.models import Account

pytestmark = pytest.mark.django_db

CHANGELIST = "admin:django_bloom_bloomfilter_changelist"


@pytest.fixture(autouse=True)
def fresh_stats():
    monitoring.forget_stats()
    yield
    monitoring.forget_stats()


@pytest.fixture
def staff_viewer(client):
    user = User.objects.create_user("viewer", password="pw", is_staff=True)
    user.user_permissions.add(
        Permission.objects.get(codename="view_bloomfilter"),
        Permission.objects.get(codename="view_blockedentry"),
    )
    client.force_login(user)
    return client


def test_changelist_shows_capacity_figures(admin_client):
    f = django_bloom.create_filter("emails", capacity=1000, error_rate=0.01)
    f.add_many([f"u{i}" for i in range(850)])
    html = admin_client.get(reverse(CHANGELIST)).content.decode()
    assert "emails" in html
    assert "/ 1,000 (" in html  # estimated items vs capacity, as text beside the bar
    assert "bloom-bar" in html
    assert "target 1 in 100" in html  # FPR in words, against the target
    assert "about 1 in " in html
    assert "filling" in html  # health as text, not only colour
    assert "KiB" in html or " B" in html


def test_unavailable_filter_is_shown_as_such(admin_client, redis_client):
    f = django_bloom.create_filter("lost", capacity=1000)
    redis_client.delete(f.layout.segment.keys.bits)
    html = admin_client.get(reverse(CHANGELIST)).content.decode()
    assert "unavailable" in html


def test_detail_page_has_counters_chart_and_projection(admin_client):
    f = django_bloom.create_filter("grow", capacity=10_000, kind="unique")
    from datetime import timedelta

    from django.utils import timezone

    now = timezone.now()
    for day, n in enumerate([1000, 2000, 3000]):
        f.add_many([f"g{i}" for i in range(n)])
        snap = monitoring.record_snapshot(f)
        FilterSnapshot.objects.filter(pk=snap.pk).update(recorded_at=now - timedelta(days=3 - day))
    url = reverse("admin:django_bloom_bloomfilter_change", args=[f.meta.pk])
    html = admin_client.get(url).content.decode()
    assert html.count('class="bloom-point"') == 3
    assert "bloom-capacity" in html
    assert 'id="bloom-full-at"' in html  # projection of when capacity is reached
    assert "database queries skipped" in html
    assert "observed false-positive rate" in html
    assert "No history yet" not in html


def test_projection_math():
    from datetime import datetime, timedelta, timezone

    class S:
        def __init__(self, t, y):
            self.recorded_at, self.estimated_items = t, y

    t0 = datetime(2026, 1, 1, tzinfo=timezone.utc)
    p = monitoring.projection([S(t0, 100), S(t0 + timedelta(days=1), 200)], capacity=500)
    assert p.items_per_day == pytest.approx(100)
    assert p.full_at.astimezone(timezone.utc) == t0 + timedelta(days=4)
    flat = monitoring.projection([S(t0, 100), S(t0 + timedelta(days=1), 100)], capacity=500)
    assert flat.full_at is None
    assert monitoring.projection([S(t0, 1)], 10) is None


@pytest.mark.parametrize("layout", ["standard", "blocked"])
def test_add_in_admin_creates_the_key_and_delete_removes_it(admin_client, redis_client, layout):
    resp = admin_client.post(
        reverse("admin:django_bloom_bloomfilter_add"),
        {
            "name": "via-admin",
            "description": "",
            "kind": "generic",
            "capacity": "5000",
            "error_rate": "0.001",
            "layout": layout,
            "cache_alias": "default",
            "source": "",
            "normalizer": "",
            "encoder": "",
        },
    )
    assert resp.status_code == 302, resp.content.decode()[:2000]
    f = django_bloom.get_filter("via-admin")
    assert f.meta.layout == layout
    assert (f.meta.num_bits, f.meta.num_hashes) == layout_class(layout).geometry(5000, 0.001)
    assert redis_client.strlen(f.layout.segment.keys.bits) == f.layout.key_bytes
    assert f.add("x") is True
    resp = admin_client.post(
        reverse("admin:django_bloom_bloomfilter_delete", args=[f.meta.pk]), {"post": "yes"}
    )
    assert resp.status_code == 302
    assert not BloomFilter.objects.filter(name="via-admin").exists()
    assert not redis_client.exists(f.layout.segment.keys.bits)


def test_view_only_staff_cannot_run_rebuild_or_clear(staff_viewer):
    f = django_bloom.create_filter("guarded", capacity=1000, source="testapp.Account.username")
    f.add("keep-me")
    page = staff_viewer.get(reverse(CHANGELIST)).content.decode()
    assert "rebuild_from_source" not in page and "clear_filters" not in page
    for action in ("rebuild_from_source", "clear_filters", "recompute_stats"):
        staff_viewer.post(reverse(CHANGELIST), {"action": action, "_selected_action": [f.meta.pk]})
    assert f.contains("keep-me")  # not cleared
    meta = BloomFilter.objects.get(name="guarded")
    assert meta.rebuild_state == "" and meta.last_rebuild_at is None
    assert FilterSnapshot.objects.count() == 0


@pytest.mark.django_db(transaction=True)
def test_rebuild_action_runs_in_background_and_records_state(admin_client):
    Account.objects.bulk_create(
        [Account(username=f"a{i}", email=f"a{i}@x.org") for i in range(500)]
    )
    f = django_bloom.create_filter("accounts", capacity=1000, source="testapp.Account.username")
    resp = admin_client.post(
        reverse(CHANGELIST), {"action": "rebuild_from_source", "_selected_action": [f.meta.pk]}
    )
    assert resp.status_code == 302  # answered at once; the work runs in a thread
    workers = [t for t in threading.enumerate() if t.name == "bloom-rebuild-accounts"]
    for worker in workers:
        worker.join(timeout=60)
    meta = BloomFilter.objects.get(pk=f.meta.pk)
    assert meta.rebuild_state == "done", meta.rebuild_error
    assert meta.rebuild_done == 500
    assert all(
        django_bloom.get_filter("accounts", refresh=True).contains_many(
            [f"a{i}" for i in range(500)]
        )
    )


def test_clear_and_recompute_actions(admin_client):
    f = django_bloom.create_filter("c", capacity=1000)
    f.add("x")
    admin_client.post(
        reverse(CHANGELIST), {"action": "recompute_stats", "_selected_action": [f.meta.pk]}
    )
    assert FilterSnapshot.objects.filter(bloom_filter=f.meta).count() == 1
    form = {"action": "clear_filters", "_selected_action": [f.meta.pk]}
    page = admin_client.post(reverse(CHANGELIST), form)
    assert page.status_code == 200  # a confirmation page first...
    assert "will read “absent”" in page.content.decode()
    assert f.contains("x")  # ...that changed nothing
    admin_client.post(reverse(CHANGELIST), {**form, "confirm": "yes"})
    assert not f.contains("x")


def test_blocklist_upload_reports_bad_lines_and_filter_follows(admin_client):
    body = b"# comment\n203.0.113.0/24\nnot-an-ip\n198.51.100.7\n999.1.1.1/8\n"
    resp = admin_client.post(
        reverse("admin:django_bloom_blockedentry_import"),
        {"file": SimpleUploadedFile("list.netset", body), "reason": "upload"},
    )
    html = resp.content.decode()
    assert resp.status_code == 200
    assert "not-an-ip" in html and "999.1.1.1/8" in html
    assert ">3<" in html and ">5<" in html  # line numbers of the bad lines
    assert BlockedEntry.objects.count() == 2
    from django_bloom import ipblock as blocklist

    assert blocklist.check_ip("203.0.113.77").blocked
    entry = BlockedEntry.objects.get(network="203.0.113.0/24")
    admin_client.post(
        reverse("admin:django_bloom_blockedentry_changelist"),
        {"action": "expire_now", "_selected_action": [entry.pk]},
    )
    assert not blocklist.check_ip("203.0.113.77").blocked  # expired entries do not block
    admin_client.post(
        reverse("admin:django_bloom_blockedentry_add"),
        {"network": "2001:db8:abcd::/48", "reason": "manual", "list_name": "ip-blocklist"},
    )
    assert blocklist.check_ip("2001:db8:abcd:1::5").blocked
    page = admin_client.get(
        reverse("admin:django_bloom_blockedentry_changelist") + "?q=198.51"
    ).content.decode()
    assert "198.51.100.7/32" in page


def test_view_only_staff_cannot_import(staff_viewer):
    resp = staff_viewer.get(reverse("admin:django_bloom_blockedentry_import"))
    assert resp.status_code == 403


@pytest.mark.django_db(transaction=True)
def test_rebuild_left_running_by_a_dead_process_does_not_block_forever(admin_client):
    Account.objects.create(username="z1", email="z1@x.org")
    f = django_bloom.create_filter("stuck", capacity=1000, source="testapp.Account.username")
    BloomFilter.objects.filter(pk=f.meta.pk).update(rebuild_state="running")  # no lock held
    # ...now a real rebuild holds the lock
    assert f.storage.begin_build(f.layout.segment, "live-one")
    admin_client.post(
        reverse(CHANGELIST), {"action": "rebuild_from_source", "_selected_action": [f.meta.pk]}
    )
    assert not [t for t in threading.enumerate() if t.name == "bloom-rebuild-stuck"]
    f.storage.abort_build(f.layout.segment, "live-one")  # the lock is gone: a stale "running" row
    admin_client.post(
        reverse(CHANGELIST), {"action": "rebuild_from_source", "_selected_action": [f.meta.pk]}
    )
    for worker in [t for t in threading.enumerate() if t.name == "bloom-rebuild-stuck"]:
        worker.join(timeout=60)
    meta = BloomFilter.objects.get(pk=f.meta.pk)
    assert meta.rebuild_state == "done", meta.rebuild_error
    assert django_bloom.get_filter("stuck", refresh=True).contains("z1")


# -- Redis down, bad input: a clear message, never a 500 or a "success" ---------------
FILTER_ADD = "admin:django_bloom_bloomfilter_add"
ENTRY_ADD = "admin:django_bloom_blockedentry_add"


def filter_form(**overrides):
    data = {
        "name": "via-admin",
        "description": "",
        "kind": "generic",
        "capacity": "5000",
        "error_rate": "0.01",
        "layout": "standard",
        "cache_alias": "default",
        "source": "",
        "normalizer": "",
        "encoder": "",
    }
    return {**data, **overrides}


def page_messages(response):
    return [(m.level_tag, str(m)) for m in response.context["messages"]]


def make_unreachable(name):
    """Point an existing filter at the settings' dead Redis alias (port 56379)."""
    from django_bloom import services

    BloomFilter.objects.filter(name=name).update(cache_alias="dead")
    services.forget_filters()


def test_add_filter_with_redis_down_is_a_form_error_not_a_500(admin_client):
    resp = admin_client.post(reverse(FILTER_ADD), filter_form(cache_alias="dead"))
    assert resp.status_code == 200  # the form again, with what was typed
    html = resp.content.decode()
    assert "Redis" in html and "nothing was saved" in html
    assert "was added successfully" not in html
    assert not BloomFilter.objects.filter(name="via-admin").exists()


def test_delete_filter_with_redis_down_says_so_and_keeps_the_row(admin_client):
    f = django_bloom.create_filter("doomed", capacity=1000)
    make_unreachable("doomed")
    url = reverse("admin:django_bloom_bloomfilter_delete", args=[f.meta.pk])
    resp = admin_client.post(url, {"post": "yes"}, follow=True)
    assert resp.status_code == 200
    levels = page_messages(resp)
    assert any(level == "error" and "nothing was deleted" in text for level, text in levels)
    assert not any(level == "success" for level, _ in levels)
    assert BloomFilter.objects.filter(name="doomed").exists()


def test_bulk_delete_with_redis_down_reports_each_filter(admin_client):
    ok = django_bloom.create_filter("fine", capacity=1000)
    bad = django_bloom.create_filter("stuck-down", capacity=1000)
    make_unreachable("stuck-down")
    resp = admin_client.post(
        reverse(CHANGELIST),
        {"action": "delete_selected", "_selected_action": [ok.meta.pk, bad.meta.pk], "post": "yes"},
        follow=True,
    )
    assert resp.status_code == 200
    levels = page_messages(resp)
    assert [level for level, _ in levels] == ["error"]
    assert "stuck-down" in levels[0][1] and "nothing was deleted" in levels[0][1]
    assert BloomFilter.objects.filter(name__in=["fine", "stuck-down"]).count() == 2
    from django.contrib.admin.models import LogEntry

    assert not LogEntry.objects.exists()  # nothing logged as deleted either


def test_add_blocked_entry_with_redis_down_is_a_form_error(admin_client):
    django_bloom.create_filter("ip-blocklist", capacity=1000, kind="blocklist")
    make_unreachable("ip-blocklist")
    resp = admin_client.post(
        reverse(ENTRY_ADD),
        {"network": "203.0.113.0/24", "reason": "x", "list_name": "ip-blocklist"},
    )
    assert resp.status_code == 200
    html = resp.content.decode()
    assert "nothing was saved" in html and "was added successfully" not in html
    assert not BlockedEntry.objects.exists()


def test_bad_capacity_gives_one_error(admin_client):
    resp = admin_client.post(reverse(FILTER_ADD), filter_form(capacity="-5"))
    assert resp.status_code == 200
    errors = resp.context["adminform"].form.errors
    assert list(errors) == ["capacity"], errors
    assert "NoneType" not in resp.content.decode()


def test_bad_network_gives_one_error(admin_client):
    resp = admin_client.post(
        reverse(ENTRY_ADD), {"network": "999.1.1.1", "reason": "", "list_name": "ip-blocklist"}
    )
    assert resp.status_code == 200
    errors = resp.context["adminform"].form.errors
    assert list(errors) == ["network"] and len(errors["network"]) == 1, errors


def expiry_fields(moment):
    from django.utils import timezone as tz

    local = tz.localtime(moment)
    return {"expires_at_0": local.strftime("%Y-%m-%d"), "expires_at_1": local.strftime("%H:%M:%S")}


def test_past_expiry_is_a_form_error(admin_client):
    from datetime import timedelta

    from django.utils import timezone as tz

    resp = admin_client.post(
        reverse(ENTRY_ADD),
        {
            "network": "203.0.113.9",
            "reason": "",
            "list_name": "ip-blocklist",
            **expiry_fields(tz.now() - timedelta(days=1)),
        },
    )
    assert resp.status_code == 200
    errors = resp.context["adminform"].form.errors
    assert list(errors) == ["expires_at"], errors
    assert "past" in str(errors["expires_at"])
    assert not BlockedEntry.objects.exists()


def test_editing_a_blocked_network_moves_the_block(admin_client):
    from django_bloom import ipblock as blocklist

    entry = blocklist.block("203.0.113.0/24", "typo")
    url = reverse("admin:django_bloom_blockedentry_change", args=[entry.pk])
    resp = admin_client.post(
        url, {"network": "198.51.100.0/24", "reason": "fixed", "list_name": "ip-blocklist"}
    )
    assert resp.status_code == 302, resp.content.decode()[:3000]
    assert not blocklist.check_ip("203.0.113.5").blocked
    assert blocklist.check_ip("198.51.100.5").blocked
    assert list(BlockedEntry.objects.values_list("network", "reason")) == [
        ("198.51.100.0/24", "fixed")
    ]


def test_filter_name_is_read_only_on_the_change_form(admin_client):
    f = django_bloom.create_filter("keep-name", capacity=1000)
    url = reverse("admin:django_bloom_bloomfilter_change", args=[f.meta.pk])
    page = admin_client.get(url)
    assert 'name="name"' not in page.content.decode()
    admin_client.post(url, {"name": "renamed", "description": "new words"})
    meta = BloomFilter.objects.get(pk=f.meta.pk)
    assert (meta.name, meta.description) == ("keep-name", "new words")


@pytest.mark.django_db(transaction=True)
def test_clear_on_a_bound_filter_rebuilds_it_instead_of_emptying_it(admin_client, monkeypatch):
    # The worker thread starts once the response is out: a second writer on the in-memory
    # SQLite test database while the request still writes would be refused ("table is
    # locked"), so the rebuild is started here, in order, as the thread would.
    started, start = [], admin_actions.start_background_rebuild
    monkeypatch.setattr(admin_actions, "start_background_rebuild", started.append)
    Account.objects.create(username="taken", email="taken@x.org")
    f = django_bloom.create_filter("bound", capacity=1000, source="testapp.Account.username")
    f.add("taken")
    form = {"action": "clear_filters", "_selected_action": [f.meta.pk]}
    page = admin_client.post(reverse(CHANGELIST), form).content.decode()
    assert 'id="bloom-clear-bound"' in page and "rebuilt from their source" in page
    assert 'id="bloom-clear-unbound"' not in page
    resp = admin_client.post(reverse(CHANGELIST), {**form, "confirm": "yes"}, follow=True)
    assert started == ["bound"]
    start("bound").join(timeout=60)
    assert any("Rebuilding bound" in text for _, text in page_messages(resp))
    assert not any("Cleared" in text for _, text in page_messages(resp))
    assert django_bloom.get_filter("bound", refresh=True).contains("taken")  # never emptied
    assert BloomFilter.objects.get(pk=f.meta.pk).rebuild_state == "done"


def test_validator_card_only_on_unique_filters_and_no_seed(admin_client):
    generic = django_bloom.create_filter("plain", capacity=1000)
    unique = django_bloom.create_filter("uniq", capacity=1000, kind="unique")
    for handle, shows in ((generic, False), (unique, True)):
        url = reverse("admin:django_bloom_bloomfilter_change", args=[handle.meta.pk])
        html = admin_client.get(url).content.decode()
        assert ('id="bloom-validator"' in html) is shows
        assert str(handle.meta.seed) not in html and "field-seed" not in html
        assert html.count("No history yet") == 1


def test_empty_filter_shows_zero_not_minus_zero(admin_client):
    f = django_bloom.create_filter("empty", capacity=1000, error_rate=0.0001)
    html = admin_client.get(reverse(CHANGELIST)).content.decode()
    assert "-0" not in html.replace("1,000 (0%)", "")
    assert "0 / 1,000 (0%)" in html
    assert "none (empty filter)" in html and "target 1 in 10,000" in html
    detail = admin_client.get(
        reverse("admin:django_bloom_bloomfilter_change", args=[f.meta.pk])
    ).content.decode()
    assert "-0" not in detail and "0 / 1,000 (0.0%)" in detail


def test_large_numbers_have_separators_on_the_detail_page(admin_client):
    f = django_bloom.create_filter("big", capacity=100_000)
    f.add_many([f"b{i}" for i in range(5000)])
    html = admin_client.get(
        reverse("admin:django_bloom_bloomfilter_change", args=[f.meta.pk])
    ).content.decode()
    assert f"{f.meta.num_bits:,}" in html and "5,000" in html


def test_snapshots_admin_shows_readable_numbers(admin_client):
    f = django_bloom.create_filter("snaps", capacity=10_000, error_rate=0.0001)
    f.add_many([f"s{i}" for i in range(1201)])
    snap = monitoring.record_snapshot(f)
    html = admin_client.get(reverse("admin:django_bloom_filtersnapshot_changelist")).content
    html = html.decode()
    assert repr(snap.estimated_items) not in html and repr(snap.current_fpr) not in html
    assert "about 1 in " in html or "under 1 in a billion" in html
    assert re.search(r">1,[12]\d\d<", html)  # ~1,201 estimated items, grouped


def test_last_rebuild_is_shown_in_the_sites_time_zone(admin_client, settings):
    from datetime import datetime
    from datetime import timezone as dt_timezone

    settings.TIME_ZONE = "Asia/Shanghai"
    f = django_bloom.create_filter("tz", capacity=1000)
    moment = datetime(2026, 3, 1, 1, 30, tzinfo=dt_timezone.utc)
    BloomFilter.objects.filter(pk=f.meta.pk).update(last_rebuild_at=moment)
    html = admin_client.get(reverse(CHANGELIST)).content.decode()
    assert "9:30" in html and "01:30" not in html


def run_action(client, action, handle):
    """Run a changelist action on one filter; the messages the next page shows."""
    form = {"action": action, "_selected_action": [handle.meta.pk]}
    return page_messages(client.post(reverse(CHANGELIST), form, follow=True))


def test_recompute_with_redis_down_claims_no_success(admin_client):
    f = django_bloom.create_filter("down", capacity=1000)
    make_unreachable("down")
    levels = run_action(admin_client, "recompute_stats", f)
    assert [level for level, _ in levels] == ["error"]
    assert not FilterSnapshot.objects.exists()


def test_changelist_leaves_a_spot_for_a_status_line(admin_client):
    html = admin_client.get(reverse(CHANGELIST)).content.decode()
    assert 'id="bloom-status"' in html


def test_rebuild_with_redis_down_says_so_and_starts_nothing(admin_client):
    f = django_bloom.create_filter("bound-down", capacity=1000, source="testapp.Account.username")
    make_unreachable("bound-down")
    levels = run_action(admin_client, "rebuild_from_source", f)
    assert [level for level, _ in levels] == ["error"] and "Redis" in levels[0][1]
    assert not [t for t in threading.enumerate() if t.name == "bloom-rebuild-bound-down"]
    assert BloomFilter.objects.get(pk=f.meta.pk).rebuild_state == ""


def test_netset_import_refuses_a_past_expiry(admin_client):
    resp = admin_client.post(
        reverse("admin:django_bloom_blockedentry_import"),
        {
            "file": SimpleUploadedFile("list.netset", b"203.0.113.0/24\n"),
            "reason": "",
            "expires_at_0": "2001-01-01",
            "expires_at_1": "12:00:00",
        },
    )
    assert resp.status_code == 200
    assert "is in the past" in resp.content.decode()
    assert not BlockedEntry.objects.exists()


def test_over_capacity_filter_says_so_instead_of_a_past_projection(admin_client):
    from datetime import timedelta

    from django.utils import timezone as tz

    f = django_bloom.create_filter("overfull", capacity=100)
    for day, n in enumerate([90, 200]):
        f.add_many([f"o{i}" for i in range(n)])
        snap = monitoring.record_snapshot(f)
        FilterSnapshot.objects.filter(pk=snap.pk).update(
            recorded_at=tz.now() - timedelta(days=2 - day)
        )
    html = admin_client.get(
        reverse("admin:django_bloom_bloomfilter_change", args=[f.meta.pk])
    ).content.decode()
    assert 'id="bloom-over"' in html and 'id="bloom-full-at"' not in html
    assert "over capacity" in html


def test_an_expired_entry_can_be_edited_and_stays_expired(admin_client):
    from datetime import timedelta

    from django.utils import timezone as tz

    from django_bloom import ipblock as blocklist

    entry = blocklist.block("203.0.113.0/24", "old", tz.now() + timedelta(days=1))
    past = tz.now() - timedelta(days=1)
    BlockedEntry.objects.filter(pk=entry.pk).update(expires_at=past)
    url = reverse("admin:django_bloom_blockedentry_change", args=[entry.pk])
    resp = admin_client.post(
        url,
        {
            "network": "203.0.113.0/24",
            "reason": "kept for the record",
            "list_name": "ip-blocklist",
            **expiry_fields(past),
        },
    )
    assert resp.status_code == 302, resp.content.decode()[:2000]
    entry.refresh_from_db()
    assert entry.reason == "kept for the record" and not entry.is_active()
    assert not blocklist.check_ip("203.0.113.5").blocked
