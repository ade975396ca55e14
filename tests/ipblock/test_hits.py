"""Hits and last seen per entry (counted in process, written in batches off the request
path), cooldown entries, and ``bloom blocklist report``."""

import io
import json
import time
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from django_bloom import ipblock
from django_bloom.ipblock import hits
from django_bloom.ipblock.admin import BlockedEntryAdmin
from django_bloom.models import BlockedEntry

pytestmark = pytest.mark.django_db

MIDDLEWARE = "django_bloom.middleware.BlocklistMiddleware"


@pytest.fixture
def installed(settings):
    settings.MIDDLEWARE = [MIDDLEWARE, *settings.MIDDLEWARE]


@pytest.fixture
def clock(monkeypatch):
    """``timezone.now()`` under the test's control: ``clock.move(minutes=9)``."""

    class Clock:
        now = timezone.now()

        def move(self, **delta):
            self.now += timedelta(**delta)

    c = Clock()
    monkeypatch.setattr(timezone, "now", lambda: c.now)
    return c


def get(address):
    return Client().get("/", REMOTE_ADDR=address).status_code


def row(network):
    return BlockedEntry.objects.get(network=network)


def test_refusals_are_counted_in_memory_then_written_in_one_batch(
    installed, django_assert_max_num_queries
):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    ipblock.block("203.0.113.0/24")
    ipblock.block("198.51.100.7")
    assert get("203.0.113.1") == get("198.51.100.7") == 403  # warms the caches
    with django_assert_max_num_queries(0):  # the request path writes nothing
        assert [get("203.0.113.9"), get("203.0.113.200"), get("198.51.100.7")] == [403] * 3
        assert get("192.0.2.1") == 200  # not listed: not counted
    assert row("203.0.113.0/24").hits == 0
    before = timezone.now()
    with CaptureQueriesContext(connection) as queries:
        hits.flush()
    updates = [q["sql"] for q in queries if "blockedentry" in q["sql"]]
    assert len(updates) == 1 and updates[0].startswith("UPDATE")  # one statement for both
    first, second = row("203.0.113.0/24"), row("198.51.100.7/32")
    assert (first.hits, second.hits) == (3, 2)
    assert before - timedelta(seconds=5) < first.last_seen_at <= timezone.now()
    hits.flush()  # nothing pending: nothing written
    assert row("203.0.113.0/24").hits == 3


def test_two_processes_flushing_add_up_and_last_seen_never_goes_back(installed):
    entry = ipblock.block("203.0.113.0/24")
    later = timezone.now() - timedelta(minutes=1)
    hits.record(entry, later)
    hits.record(entry, later)
    hits.flush()
    hits.record(entry, later - timedelta(minutes=5))  # another process's older count
    hits.flush()
    entry.refresh_from_db()
    assert entry.hits == 3 and entry.last_seen_at == later


def test_hits_of_a_deleted_entry_are_dropped_quietly(installed, caplog):
    entry = ipblock.block("203.0.113.0/24")
    hits.record(entry)
    ipblock.unblock("203.0.113.0/24")
    hits.flush()
    assert not BlockedEntry.objects.exists() and "could not" not in caplog.text


@pytest.mark.django_db(transaction=True)
def test_the_writer_thread_flushes_hits(installed, monkeypatch):
    """The counters' writer thread (counters.py) writes them, on its own connection."""
    from django.db import OperationalError

    from django_bloom import counters

    entry = ipblock.block("203.0.113.0/24")
    monkeypatch.setattr(counters, "FLUSH_SECONDS", 0.05)
    hits.record(entry)
    deadline = time.monotonic() + 60
    while True:
        try:
            if row("203.0.113.0/24").hits == 1:
                break
        except OperationalError:  # SQLite's shared in-memory test database: a table lock
            pass
        assert time.monotonic() < deadline, "the writer thread never wrote the hit"
        time.sleep(0.05)


def test_admin_shows_and_sorts_by_hits(installed, admin_client):
    for network, count in (("203.0.113.0/24", 2), ("198.51.100.0/24", 9), ("192.0.2.0/24", 0)):
        entry = ipblock.block(network)
        for _ in range(count):
            hits.record(entry)
    hits.flush()
    url = reverse("admin:django_bloom_blockedentry_changelist")
    html = admin_client.get(url).content.decode()
    assert "Hits" in html and "Last seen" in html
    column = BlockedEntryAdmin.list_display.index("hits") + 1  # after the checkbox column
    order = admin_client.get(f"{url}?o=-{column}").content.decode()  # by hits, descending
    assert (
        order.index("198.51.100.0/24") < order.index("203.0.113.0/24") < order.index("192.0.2.0/24")
    )


# -- cooldown ----------------------------------------------------------------------
def test_a_cooldown_entry_restarts_its_expiry_on_each_refusal(installed, clock):
    ipblock.block("203.0.113.0/24", cooldown=timedelta(minutes=10))
    assert row("203.0.113.0/24").expires_at == clock.now + timedelta(minutes=10)
    assert get("203.0.113.5") == 403
    clock.move(minutes=9)
    assert get("203.0.113.5") == 403  # restarts: now expires 10 minutes from here
    clock.move(minutes=9)
    assert get("203.0.113.5") == 403  # 18 minutes after blocking, still refused
    last = clock.now
    hits.flush()
    assert row("203.0.113.0/24").expires_at == last + timedelta(minutes=10)
    # Another process (its caches empty) reads the restarted expiry from the database.
    ipblock.forget_caches()
    clock.move(minutes=9, seconds=59)
    assert get("203.0.113.5") == 403
    clock.move(minutes=10, seconds=1)  # 10 minutes without a refusal: expired
    assert get("203.0.113.5") == 200
    clock.move(minutes=1)
    assert get("203.0.113.5") == 200  # an expired entry refuses nothing, so never restarts


def test_a_flush_never_shortens_an_expiry(installed, clock):
    entry = ipblock.block("203.0.113.0/24", cooldown=timedelta(minutes=10))
    hits.record(entry)
    BlockedEntry.objects.update(expires_at=clock.now + timedelta(days=1))  # meanwhile, longer
    hits.flush()
    assert row("203.0.113.0/24").expires_at == clock.now + timedelta(days=1)


def test_cooldown_is_validated():
    with pytest.raises(ValueError, match="cooldown"):
        ipblock.block("203.0.113.0/24", cooldown=timedelta(0))
    with pytest.raises(TypeError, match="cooldown"):
        ipblock.block("203.0.113.0/24", cooldown=600)
    assert not BlockedEntry.objects.exists()


# -- bloom blocklist report ------------------------------------------------------------
def report(*args):
    out = io.StringIO()
    call_command("bloom", "blocklist", "report", *args, stdout=out)
    return out.getvalue()


def test_report_lists_top_entries_and_those_never_hit_since_a_date(installed, clock):
    counts = {"203.0.113.0/24": 5, "198.51.100.0/24": 2, "192.0.2.0/24": 0}
    for network, count in counts.items():
        entry = ipblock.block(network, reason=f"r{count}")
        for _ in range(count):
            hits.record(entry)
    hits.flush()
    text = report("--top", "2")
    assert text.index("203.0.113.0/24") < text.index("198.51.100.0/24")
    assert "192.0.2.0/24" not in text.split("Never hit")[0]
    since = (clock.now - timedelta(days=1)).date().isoformat()
    unused = report("--unused-since", since).split("Never hit")[1]
    assert "192.0.2.0/24" in unused and "203.0.113.0/24" not in unused
    data = json.loads(report("--json", "--unused-since", since))
    assert [e["network"] for e in data["top"]][:2] == ["203.0.113.0/24", "198.51.100.0/24"]
    assert data["top"][0]["hits"] == 5 and data["top"][0]["reason"] == "r5"
    assert [e["network"] for e in data["unused"]] == ["192.0.2.0/24"]
