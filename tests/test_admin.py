"""Admin pages: figures, chart, actions with permissions, blocklist upload."""

import threading

import pytest
from django.contrib.auth.models import Permission, User
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse

import django_bloom
from django_bloom import hashing, monitoring
from django_bloom.models import BlockedEntry, BloomFilter, FilterSnapshot
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
    assert "vs 1e-02" in html  # current FPR vs target
    assert "filling" in html  # health as text, not only colour
    assert "KiB" in html or " B" in html


def test_unavailable_filter_is_shown_as_such(admin_client, redis_client):
    f = django_bloom.create_filter("lost", capacity=1000)
    redis_client.delete(f.layout.keys.bits)
    html = admin_client.get(reverse(CHANGELIST)).content.decode()
    assert "unavailable" in html


def test_detail_page_has_counters_chart_and_projection(admin_client):
    f = django_bloom.create_filter("grow", capacity=10_000)
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
    assert "observed FPR" in html


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
    assert (f.meta.num_bits, f.meta.num_hashes) == hashing.geometry(
        5000, 0.001, blocked=layout == "blocked"
    )
    assert redis_client.strlen(f.layout.keys.bits) == f.layout.key_length
    assert f.add("x") is True
    resp = admin_client.post(
        reverse("admin:django_bloom_bloomfilter_delete", args=[f.meta.pk]), {"post": "yes"}
    )
    assert resp.status_code == 302
    assert not BloomFilter.objects.filter(name="via-admin").exists()
    assert not redis_client.exists(f.layout.keys.bits)


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
    admin_client.post(
        reverse(CHANGELIST), {"action": "clear_filters", "_selected_action": [f.meta.pk]}
    )
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
    from django_bloom import blocklist

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
    assert f.storage.begin_build(f.layout, "live-one")  # ...now a real rebuild holds the lock
    admin_client.post(
        reverse(CHANGELIST), {"action": "rebuild_from_source", "_selected_action": [f.meta.pk]}
    )
    assert not [t for t in threading.enumerate() if t.name == "bloom-rebuild-stuck"]
    f.storage.abort_build(f.layout, "live-one")  # the lock is gone: a stale "running" row
    admin_client.post(
        reverse(CHANGELIST), {"action": "rebuild_from_source", "_selected_action": [f.meta.pk]}
    )
    for worker in [t for t in threading.enumerate() if t.name == "bloom-rebuild-stuck"]:
        worker.join(timeout=60)
    meta = BloomFilter.objects.get(pk=f.meta.pk)
    assert meta.rebuild_state == "done", meta.rebuild_error
    assert django_bloom.get_filter("stuck", refresh=True).contains("z1")
