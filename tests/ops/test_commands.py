"""``manage.py bloom``: every subcommand end to end against the real Redis.

Exit codes: 0 ok, 1 ``check`` absent (SystemExit(1)) / ``clear`` cancelled,
2 errors (CommandError.returncode == 2). The last tests run the command in a
subprocess, as a shell script would, with a file-backed SQLite database.
"""

from __future__ import annotations

import io
import json
import re
import subprocess
from datetime import timedelta

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

import django_bloom
from django_bloom import counters
from django_bloom.management.cli import expiry
from django_bloom.models import BlockedEntry, BloomFilter, FilterSnapshot

pytestmark = pytest.mark.django_db


def digits_only(value):
    """Encoder for tests: refuses anything but digits."""
    if not str(value).isdigit():
        raise ValueError("digits only")
    return int(value)


class TTY(io.StringIO):
    def isatty(self) -> bool:
        return True


def bloom(*args, stdin=None, stderr=None, **options):
    out, err = io.StringIO(), stderr if stderr is not None else io.StringIO()
    if stdin is not None:
        options["stdin"] = io.StringIO(stdin)
    call_command("bloom", *args, stdout=out, stderr=err, **options)
    return out.getvalue(), err.getvalue()


def error_of(*args, **options) -> CommandError:
    with pytest.raises(CommandError) as info:
        bloom(*args, **options)
    return info.value


def make(name="f", capacity=1000, error_rate=0.01, **kw):
    return django_bloom.create_filter(name, capacity=capacity, error_rate=error_rate, **kw)


# -- create ---------------------------------------------------------------------
def test_create_writes_row_and_full_size_key(redis_client):
    out, _ = bloom(
        "create", "emails", "--capacity", "5000", "--error-rate", "0.001",
        "--description", "sign-up e-mails", "--kind", "unique",
        "--source", "testapp.Account.email", "--normalizer", "email",
    )  # fmt: skip
    meta = BloomFilter.objects.get(name="emails")
    assert (meta.capacity, meta.error_rate, meta.kind) == (5000, 0.001, "unique")
    assert (meta.source, meta.normalizer, meta.description) == (
        "testapp.Account.email",
        "email",
        "sign-up e-mails",
    )
    f = django_bloom.get_filter("emails")
    assert redis_client.strlen(f.layout.segment.keys.bits) == f.layout.key_bytes
    assert "Created filter 'emails' (unique): capacity 5,000" in out
    assert f"{meta.num_hashes} hashes" in out


@pytest.mark.parametrize(
    "args, message",
    [
        (["--capacity", "100", "--error-rate", "0.01", "--cache-alias", "nope"], "'nope'"),
        (["--capacity", "100", "--error-rate", "0.01", "--source", "testapp.Account"], "look like"),
        (["--capacity", "100", "--error-rate", "0.01", "--source", "testapp.Nope.x"], "Nope"),
        (["--capacity", "100", "--error-rate", "0.01", "--source", "testapp.Account.x"], "field"),
        (["--capacity", "100", "--error-rate", "0.01", "--normalizer", "no.such.fn"], "no.such"),
    ],
)
def test_create_bad_input_writes_nothing(args, message, redis_client, bloom_prefix):
    exc = error_of("create", "bad", *args)
    assert exc.returncode == 2 and message in str(exc)
    assert not BloomFilter.objects.exists()
    assert not list(redis_client.scan_iter(match=f"{bloom_prefix}:*"))


@pytest.mark.parametrize(
    "args, message",
    [
        (["--capacity", "0", "--error-rate", "0.01"], "must be at least 1"),
        (["--capacity", "ten", "--error-rate", "0.01"], "whole number"),
        (["--capacity", "10", "--error-rate", "1.5"], "strictly between 0 and 1"),
        (["--error-rate", "0.01"], "--capacity"),
        (["--capacity", "100", "--kind", "weird"], "invalid choice: 'weird'"),
        (["--capacity", "100", "--layout", "round"], "invalid choice: 'round'"),
    ],
)
def test_create_argument_errors(args, message):
    exc = error_of("create", "bad", *args)
    assert message in str(exc)
    assert not BloomFilter.objects.exists()


def test_create_defaults_to_one_percent_and_takes_a_layout(redis_client):
    out, _ = bloom("create", "quick", "--capacity", "1000", "--layout", "blocked")
    meta = BloomFilter.objects.get(name="quick")
    assert (meta.error_rate, meta.layout) == (0.01, "blocked")
    f = django_bloom.get_filter("quick")
    assert redis_client.strlen(f.layout.segment.keys.bits) == f.layout.key_bytes
    assert "error rate 0.01" in out and "blocked" in out


def test_create_tiny_filter_reads_as_english():
    out, _ = bloom("create", "tiny", "--capacity", "1", "--error-rate", "0.5")
    meta = BloomFilter.objects.get(name="tiny")
    assert meta.num_hashes == 1
    assert "1 hash," in out and "1 hashes" not in out
    assert f"{meta.num_bits} bits" in out or "1 bit " in out


def test_create_existing_name_is_an_error():
    make("taken")
    exc = error_of("create", "taken", "--capacity", "10", "--error-rate", "0.1")
    assert exc.returncode == 2 and "already exists" in str(exc)


def test_create_invalid_name_is_an_error():
    exc = error_of("create", "has space", "--capacity", "10", "--error-rate", "0.1")
    assert exc.returncode == 2 and "invalid filter name" in str(exc)


# -- add ------------------------------------------------------------------------
def test_add_arguments_file_and_stdin(tmp_path):
    f = make()
    out, _ = bloom("add", "f", "a", "b", "a")
    assert "3 items: 2 new, 1 already (maybe) present" in out
    path = tmp_path / "items.txt"
    path.write_text("c\n\n  d  \nb\n", encoding="utf-8")
    out, _ = bloom("add", "f", "--file", str(path))
    assert "3 items: 2 new, 1 already (maybe) present" in out
    out, _ = bloom("add", "f", "--file", "-", stdin="e\nf\r\nc\n")
    assert "3 items: 2 new, 1 already (maybe) present" in out
    out, _ = bloom("add", "f", "g")
    assert "1 item: 1 new, 0 already (maybe) present" in out  # not "1 items"
    assert f.contains_many(list("abcdef")) == [True] * 6
    assert f.contains("  d  ") is False  # surrounding whitespace is not part of an item


def test_add_batches_large_input():
    f = make(capacity=50_000)
    lines = "\n".join(f"user-{i}" for i in range(25_000))
    out, _ = bloom("add", "f", "--file", "-", stdin=lines)
    # A few adds may be false positives ("already present") as the filter fills.
    match = re.search(r"25,000 items: ([\d,]+) new, ([\d,]+) already", out)
    new, old = (int(g.replace(",", "")) for g in match.groups())
    assert new + old == 25_000 and new >= 24_900
    assert all(f.contains_many([f"user-{i}" for i in range(25_000)]))


def test_add_bad_item_writes_nothing(tmp_path, redis_client):
    f = make(encoder=digits_only)
    before = redis_client.get(f.layout.segment.keys.bits)
    path = tmp_path / "items.txt"
    path.write_text("1\n2\n\nthree\n4\n", encoding="utf-8")
    exc = error_of("add", "f", "--file", str(path))
    assert exc.returncode == 2
    assert "line 4: cannot add 'three'" in str(exc) and "Nothing was added" in str(exc)
    assert redis_client.get(f.layout.segment.keys.bits) == before


def test_add_errors():
    make()
    assert error_of("add", "f").returncode == 2
    exc = error_of("add", "nope", "x")
    assert exc.returncode == 2 and "no Bloom filter named 'nope'" in str(exc)
    exc = error_of("add", "f", "--file", "/nonexistent/items.txt")
    assert exc.returncode == 2 and "cannot read /nonexistent/items.txt" in str(exc)


def test_add_and_remove_without_items_say_so_before_any_lookup():
    for verb in ("add", "remove"):
        exc = error_of(verb, "nope")  # no such filter either: the missing items come first
        assert exc.returncode == 2 and str(exc) == (
            f"nothing to {verb}: give items as arguments or --file PATH ('-' for stdin)"
        )


def test_add_on_dead_redis_is_an_error():
    # create_filter needs Redis, so write the row directly.
    meta = BloomFilter(name="down", capacity=100, error_rate=0.01, cache_alias="dead")
    meta.save()
    exc = error_of("add", "down", "x")
    assert exc.returncode == 2 and "unreachable" in str(exc)


# -- check ----------------------------------------------------------------------
def test_check_exit_codes():
    make().add("here")
    out, _ = bloom("check", "f", "here")
    assert out.strip() == "maybe present"
    out = io.StringIO()
    with pytest.raises(SystemExit) as info:
        call_command("bloom", "check", "f", "not-here", stdout=out)
    assert info.value.code == 1 and out.getvalue().strip() == "absent"
    assert error_of("check", "nope", "x").returncode == 2


def test_check_lost_key_is_an_error_not_absent(redis_client):
    f = make()
    f.add("x")
    redis_client.delete(f.layout.segment.keys.bits)
    exc = error_of("check", "f", "x")
    assert exc.returncode == 2 and "missing" in str(exc)


def test_check_quiet_with_verbosity_0():
    make().add("x")
    out, _ = bloom("check", "f", "x", verbosity=0)
    assert out == ""


def test_check_file_prints_the_lines_that_may_be_present(tmp_path):
    make(encoder=digits_only).add_many(["1", "2"])
    path = tmp_path / "probes.txt"
    path.write_text("1\n30\n\n  2 \n", encoding="utf-8")
    out, err = bloom("check", "f", "--file", str(path))
    assert out == "1\n2\n"  # as read, stripped; nothing else on stdout
    assert err == "3 lines: 2 maybe present, 1 absent from 'f'.\n"
    out, _ = bloom("check", "f", "--file", "-", "--absent", stdin="30\n1\n40\n")
    assert out == "30\n40\n"
    with pytest.raises(SystemExit) as none_present:
        bloom("check", "f", "--file", "-", stdin="30\n40\n")
    assert none_present.value.code == 1
    exc = error_of("check", "f", "--file", "-", stdin="1\n2\nthree\n")
    assert exc.returncode == 2 and "line 3: cannot check 'three': digits only" in str(exc)
    for args in (("check", "f"), ("check", "f", "1", "--file", str(path))):
        assert "give one ITEM, or --file PATH" in str(error_of(*args))


class LinesOnly(io.StringIO):
    """stdin that may be read line by line only: the old command read it whole."""

    def read(self, size=-1):
        raise AssertionError("the whole input was read at once")


def test_add_check_and_remove_read_their_input_a_line_at_a_time():
    f = make(capacity=50_000, layout="counting")
    lines = "".join(f"item-{i}\n" for i in range(25_000))
    out, _ = call_with_stdin(LinesOnly(lines), "add", "f", "--file", "-")
    assert "25,000 items: " in out and f.contains("item-24999")
    out, err = call_with_stdin(LinesOnly(lines), "check", "f", "--file", "-")
    assert len(out.splitlines()) == 25_000 and err.startswith("25,000 lines: 25,000 maybe")
    out, _ = call_with_stdin(LinesOnly(lines), "remove", "f", "--file", "-")
    assert "25,000 items: 25,000 removed, 0 refused" in out


def call_with_stdin(stdin, *args):
    out, err = io.StringIO(), io.StringIO()
    call_command("bloom", *args, stdin=stdin, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def test_a_bad_line_late_in_stdin_writes_nothing(redis_client):
    f = make(capacity=50_000, encoder=digits_only)
    before = redis_client.get(f.layout.segment.keys.bits)
    exc = error_of("add", "f", "--file", "-", stdin="".join(f"{i}\n" for i in range(25_000)) + "x")
    assert "line 25001: cannot add 'x'" in str(exc) and "Nothing was added" in str(exc)
    assert redis_client.get(f.layout.segment.keys.bits) == before


# -- stats ----------------------------------------------------------------------
def test_stats_table_and_json():
    a = make("alpha", capacity=1000)
    a.add_many([f"i{i}" for i in range(500)])
    make("beta", capacity=100, kind="blocklist").add_many([f"j{i}" for i in range(150)])
    out, _ = bloom("stats")
    header, row_a, row_b = out.strip().splitlines()
    assert header.split()[:4] == ["NAME", "KIND", "CAPACITY", "EST."]
    assert row_a.split()[:3] == ["alpha", "generic", "1,000"]
    assert row_a.split()[-1] == "ok"
    assert row_b.startswith("beta") and row_b.endswith("over capacity")

    out, _ = bloom("stats", "alpha", "--json")
    (data,) = json.loads(out)
    stats = a.stats()
    assert data["name"] == "alpha" and data["kind"] == "generic" and data["state"] == "ok"
    assert data["capacity"] == 1000 and data["error_rate"] == 0.01
    assert data["bits_set"] == stats.bits_set
    assert data["estimated_items"] == pytest.approx(stats.estimated_items)
    assert abs(data["estimated_items"] - 500) < 25
    assert data["current_fpr"] == pytest.approx(stats.current_fpr)
    assert data["memory_bytes"] >= a.layout.key_bytes


def test_stats_of_an_empty_filter_say_zero_not_minus_zero():
    import math

    make("empty")
    out, _ = bloom("stats")
    assert "-0" not in out and " 0.0% " in out
    (data,) = json.loads(bloom("stats", "--json")[0])
    assert data["estimated_items"] == 0 and math.copysign(1, data["estimated_items"]) == 1
    assert "-0" not in bloom("stats", "--json")[0]


def test_stats_empty_and_unknown():
    out, _ = bloom("stats")
    assert "No Bloom filters yet" in out
    assert json.loads(bloom("stats", "--json")[0]) == []
    make("alpha")
    exc = error_of("stats", "alpha", "nope")
    assert exc.returncode == 2 and "'nope'" in str(exc)


def test_stats_reports_unavailable_filter_and_exits_2(redis_client):
    make("alpha")
    lost = make("lost")
    redis_client.delete(lost.layout.segment.keys.bits)
    out = io.StringIO()
    with pytest.raises(CommandError) as info:
        call_command("bloom", "stats", "--json", stdout=out)
    assert info.value.returncode == 2 and "lost" in str(info.value)
    data = {d["name"]: d for d in json.loads(out.getvalue())}
    assert data["alpha"]["state"] == "ok"
    assert data["lost"]["state"] == "unavailable" and "missing" in data["lost"]["error"]


def test_stats_record_writes_snapshots():
    a = make("alpha")
    a.add_many(["x", "y", "z"])
    make("beta")
    out, _ = bloom("stats", "--record")
    assert "Recorded 2 snapshot(s)." in out
    snap = FilterSnapshot.objects.get(bloom_filter__name="alpha")
    assert snap.bits_set == a.stats().bits_set
    assert FilterSnapshot.objects.filter(bloom_filter__name="beta").count() == 1


def test_stats_record_counts_each_filters_bits_once(monkeypatch):
    """The stats it prints are the ones it records: one BITCOUNT pass per filter, not two
    (a big filter's bits are counted in chunks: the second pass doubled the command's cost)."""
    from django_bloom.filter import Filter

    make("alpha").add_many(["x", "y", "z"])
    make("beta")
    read = []
    real = Filter.stats
    monkeypatch.setattr(Filter, "stats", lambda self: read.append(self.name) or real(self))
    out, _ = bloom("stats", "--record")
    assert "Recorded 2 snapshot(s)." in out
    assert sorted(read) == ["alpha", "beta"]


# -- rebuild --------------------------------------------------------------------
def test_rebuild_without_source_is_an_error():
    make()
    exc = error_of("rebuild", "f")
    assert exc.returncode == 2 and "no bound source" in str(exc)


def test_rebuild_from_bound_source_with_normalizer_and_resize():
    from tests.testapp.models import Account

    Account.objects.bulk_create(
        [Account(username=f"User{i}", email=f"u{i}@Example.org") for i in range(300)]
    )
    f = make("names", source="testapp.Account.username", normalizer="username")
    out, _ = bloom("rebuild", "names")
    assert "Rebuilt 'names' from testapp.Account.username: 300 items" in out
    assert all(f.contains_many([f"user{i}" for i in range(300)]))  # normalised: casefolded
    assert BloomFilter.objects.get(name="names").rebuild_state == "done"
    # check and add apply the same normaliser as the rebuild did
    assert bloom("check", "names", "USER7")[0].strip() == "maybe present"
    bloom("add", "names", "NewComer")
    raw = f.without_normalizer  # what was written: the normalised form only
    assert raw.contains("newcomer") and not raw.contains("NewComer")
    out, _ = bloom("rebuild", "names", "--capacity", "5000", "--error-rate", "0.001")
    meta = BloomFilter.objects.get(name="names")
    assert (meta.capacity, meta.error_rate) == (5000, 0.001)
    assert "capacity 5,000, error rate 0.001" in out
    resized = django_bloom.get_filter("names", refresh=True)
    assert all(resized.contains_many([f"user{i}" for i in range(300)]))


def test_rebuild_progress_shows_the_row_total():
    from tests.testapp.models import Account

    Account.objects.bulk_create([Account(username=f"p{i}", email=f"p{i}@x.org") for i in range(50)])
    make("emails", source="testapp.Account.email")
    tty = TTY()
    bloom("rebuild", "emails", stderr=tty)
    assert "50/50" in tty.getvalue() and "100.0%" in tty.getvalue()


# -- clear ----------------------------------------------------------------------
def test_clear_confirms_unless_yes(monkeypatch):
    f = make()
    f.add("x")
    monkeypatch.setattr("builtins.input", lambda prompt: "no")
    with pytest.raises(CommandError) as info:
        bloom("clear", "f")
    assert info.value.returncode == 1 and "nothing was cleared" in str(info.value)
    assert f.contains("x")

    def closed_stdin(prompt):
        raise EOFError

    monkeypatch.setattr("builtins.input", closed_stdin)
    assert error_of("clear", "f").returncode == 1
    assert f.contains("x")
    prompts = []
    monkeypatch.setattr("builtins.input", lambda prompt: prompts.append(prompt) or "yes")
    out, _ = bloom("clear", "f")
    assert prompts and "'f'" in prompts[0] and out.strip() == "Cleared 'f'."
    assert not f.contains("x")
    f.add("y")
    monkeypatch.setattr("builtins.input", lambda prompt: pytest.fail("must not ask"))
    bloom("clear", "f", "--yes")
    assert not f.contains("y")
    f.add("z")
    bloom("clear", "f", "--noinput")
    assert not f.contains("z")


def test_clear_where_stdin_cannot_be_read_clears_nothing(monkeypatch):
    """As delete: an unreadable stdin (OSError, as pytest's own) is no answer, exit 1."""
    f = make()
    f.add("x")

    def unreadable(prompt):
        raise OSError("reading from stdin while output is captured")

    monkeypatch.setattr("builtins.input", unreadable)
    exc = error_of("clear", "f")
    assert exc.returncode == 1 and str(exc) == "Cancelled: nothing was cleared."
    assert f.contains("x")


# -- measure --------------------------------------------------------------------
def test_measure_matches_target_and_writes_nothing(redis_client, bloom_prefix):
    n = 5000
    f = make(capacity=n, error_rate=0.01)
    f.add_many(f"in-{i}" for i in range(n))
    counters.flush()  # this process's pending items_added counter, not measure's doing
    keys_before = sorted(redis_client.scan_iter(match=f"{bloom_prefix}:*"))
    value_before = redis_client.get(f.layout.segment.keys.bits)
    added_before = counters.items_added(f)
    out, _ = bloom("measure", "f", "--probes", "20000", "--json")
    report = json.loads(out)
    assert report["probes"] == 20_000 and report["target_fpr"] == 0.01
    assert report["hits"] == round(report["measured_fpr"] * 20_000)
    assert 0.004 <= report["measured_fpr"] <= 0.02  # expected ~0.01, sd ~0.0007
    assert report["ci95"][0] <= report["measured_fpr"] <= report["ci95"][1]
    assert 0.005 <= report["fill_estimate_fpr"] <= 0.02
    # Nothing written: same keys, byte-identical bitmap and trailer (write counter).
    assert sorted(redis_client.scan_iter(match=f"{bloom_prefix}:*")) == keys_before
    assert redis_client.get(f.layout.segment.keys.bits) == value_before
    assert counters.items_added(f) == added_before
    text, _ = bloom("measure", "f", "--probes", "1000")
    assert "measured FPR" in text and "target FPR     0.010000" in text


def test_measure_empty_filter_measures_zero():
    make()
    report = json.loads(bloom("measure", "f", "--probes", "5000", "--json")[0])
    assert report["hits"] == 0 and report["measured_fpr"] == 0.0


# -- import-blocklist -----------------------------------------------------------
NETSET = """\
# FireHOL-style header
# comment lines and blank lines are ignored

1.2.3.4
10.0.0.0/8
not-an-address
2001:db8::/48
300.1.2.3
1.2.3.4
"""


def test_import_blocklist_reports_bad_lines_and_imports_the_rest(tmp_path):
    from django_bloom.models import BlockedEntry

    path = tmp_path / "level1.netset"
    path.write_text(NETSET, encoding="utf-8")
    out, err = bloom("import-blocklist", str(path), "--reason", "firehol", "--expires", "7d")
    assert f"{path}:6: skipped 'not-an-address'" in err
    assert f"{path}:8: skipped '300.1.2.3'" in err
    assert err.count("skipped") == 2
    assert "Imported 3 new entries (1 already listed, 2 bad lines skipped)." in out
    entries = BlockedEntry.objects.all()
    assert sorted(e.network for e in entries) == ["1.2.3.4/32", "10.0.0.0/8", "2001:db8::/48"]
    soon = timezone.now() + timedelta(days=7)
    assert all(e.reason == "firehol" for e in entries)
    assert all(abs((e.expires_at - soon).total_seconds()) < 120 for e in entries)


def test_blocklist_filters_check_rebuild_and_refuse_raw_adds(redis_client):
    bloom("import-blocklist", "-", "--reason", "abuse", stdin="10.0.0.0/8\n2001:db8::/48\n")
    out, _ = bloom("check", "ip-blocklist", "10.20.30.40")
    assert out.strip() == "blocked: 10.20.30.40 is in 10.0.0.0/8 (abuse)"
    out = io.StringIO()
    with pytest.raises(SystemExit) as info:
        call_command("bloom", "check", "ip-blocklist", "11.0.0.1", stdout=out)
    assert info.value.code == 1 and out.getvalue().strip() == "not blocked: 11.0.0.1 (not listed)"
    assert bloom("check", "ip-blocklist", "2001:db8:0:1::5")[0].startswith("blocked:")
    assert error_of("check", "ip-blocklist", "not-an-ip").returncode == 2
    exc = error_of("add", "ip-blocklist", "192.0.2.1")
    assert exc.returncode == 2 and "import-blocklist" in str(exc)
    # A lost key comes back from the rows.
    f = django_bloom.get_filter("ip-blocklist")
    redis_client.delete(f.layout.segment.keys.bits)
    out, _ = bloom("rebuild", "ip-blocklist")
    assert "Rebuilt blocklist 'ip-blocklist' from its active BlockedEntry rows: 2 networks" in out
    assert bloom("check", "ip-blocklist", "10.0.0.1")[0].startswith("blocked:")


def test_import_blocklist_from_stdin_and_all_bad_is_an_error():
    out, _ = bloom("import-blocklist", "-", stdin="192.0.2.0/24\n")
    assert "Imported 1 new entries" in out
    exc = error_of("import-blocklist", "-", stdin="junk\nmore junk\n")
    assert exc.returncode == 2 and "every line was rejected" in str(exc)
    exc = error_of("import-blocklist", "/nonexistent.netset")
    assert exc.returncode == 2


def test_import_blocklist_strict_imports_nothing_on_a_bad_line(tmp_path):
    from django_bloom.models import BlockedEntry

    path = tmp_path / "level1.netset"
    path.write_text(NETSET, encoding="utf-8")
    err = io.StringIO()
    with pytest.raises(CommandError) as info:
        call_command("bloom", "import-blocklist", str(path), "--strict", stdout=io.StringIO(),
                     stderr=err)  # fmt: skip
    assert info.value.returncode == 2 and "nothing was imported" in str(info.value)
    assert f"{path}:6: 'not-an-address'" in err.getvalue()
    assert f"{path}:8: '300.1.2.3'" in err.getvalue()
    assert not BlockedEntry.objects.exists()
    assert not BloomFilter.objects.exists()


def test_import_blocklist_rejects_past_or_garbage_expiry(tmp_path):
    assert "is in the past" in str(error_of("import-blocklist", "-", "--expires", "2001-01-01"))
    assert "duration" in str(error_of("import-blocklist", "-", "--expires", "soon"))
    for args in (["--expires", "-1d"], ["--expires=-1d"]):
        exc = error_of("import-blocklist", "-", *args, stdin="203.0.113.1\n")
        assert "is in the past" in str(exc) and "expected one argument" not in str(exc)
    assert not BlockedEntry.objects.exists()


def test_blocklist_report_says_what_a_date_is_for_a_day_that_does_not_exist():
    # --unused-since reads dates as --expires does (cli.iso_moment): no "invalid _day value"
    exc = error_of("blocklist", "report", "--unused-since", "2030-02-31")
    assert "expected a date (2030-01-31) or a datetime, got '2030-02-31'" in str(exc)


def test_expiry_parser():
    now = timezone.now()
    assert expiry("7d", now) == now + timedelta(days=7)
    assert expiry("90m", now) == now + timedelta(minutes=90)
    assert expiry("2W", now) == now + timedelta(weeks=2)
    day = expiry("2999-01-31", now)
    assert (day.year, day.month, day.day, day.hour) == (2999, 1, 31, 0)
    assert timezone.is_aware(day)
    exact = expiry("2999-01-31T12:30:00+00:00", now)
    assert exact.hour == 12 and exact.minute == 30


# -- progress -------------------------------------------------------------------
def test_progress_bar_only_on_a_tty():
    make(capacity=30_000)
    lines = "\n".join(f"p{i}" for i in range(25_000))
    tty = TTY()
    bloom("add", "f", "--file", "-", stdin=lines, stderr=tty)
    drawn = tty.getvalue()
    assert drawn.startswith("\radding to f [") and "25,000/25,000" in drawn
    assert "100.0%" in drawn and drawn.endswith("\n")
    _, err = bloom("add", "f", "--file", "-", stdin=lines)  # StringIO: not a TTY
    assert err == ""


# -- as a shell sees it ---------------------------------------------------------
def test_exit_codes_in_a_subprocess(django_process):
    """python -m django (== django-admin) with a file-backed DB: real exit codes."""

    def django(*args):
        proc = django_process(*args)
        out, err = proc.communicate(timeout=120)
        return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)

    # The database/Redis checks must not crash before the tables exist.
    early = django("check", "--database", "default")
    assert early.returncode == 0 and "Traceback" not in early.stderr, early.stderr
    assert django("migrate", "-v", "0").returncode == 0
    made = django("bloom", "create", "cli", "--capacity", "1000", "--error-rate", "0.01")
    assert made.returncode == 0, made.stderr
    assert django("bloom", "add", "cli", "alice").returncode == 0
    hit = django("bloom", "check", "cli", "alice")
    assert (hit.returncode, hit.stdout.strip()) == (0, "maybe present")
    miss = django("bloom", "check", "cli", "bob")
    assert (miss.returncode, miss.stdout.strip()) == (1, "absent")
    unknown = django("bloom", "check", "nope", "x")
    assert unknown.returncode == 2 and "no Bloom filter named 'nope'" in unknown.stderr


def test_create_help_lists_every_registered_kind_with_its_description(capsys):
    """Kind knowledge lives in the kind: the help is the registry's, as the admin's choices."""
    from django_bloom.engine.kinds import layout_class, layout_names

    with pytest.raises(SystemExit):
        call_command("bloom", "create", "--help")
    shown = "".join(capsys.readouterr().out.split())  # as argparse wraps it
    for name in layout_names():
        assert "".join(f"{name}: {layout_class(name).description}".split()) in shown
