"""Counting filters (layout ``counting``): 4-bit counters in Redis, checked against a
Python model of the same counters; removal, saturation, lost keys, rebuild, batches,
processes writing at once, and the IP blocklist's unblock."""

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import django_bloom
from django_bloom.engine import hashing
from django_bloom.engine.kinds import layout_class
from django_bloom.exceptions import FilterKeyMissing, OperationNotSupported

pytestmark = pytest.mark.django_db

MAX = 15
ROOT = Path(__file__).resolve().parents[2]


def counting(name="c", capacity=1000, error_rate=0.01, **kw):
    return django_bloom.create_filter(
        name, capacity=capacity, error_rate=error_rate, layout="counting", **kw
    )


def positions_of(f, item):
    return f.positions(f.hashes([item]))


def counters(f, positions=None):
    """The counters in Redis (all of them, or at ``positions`` as BITFIELD GET u4 reads them)."""
    if positions is None:  # all of them: the raw bytes, two counters per byte (high first)
        raw = f.storage.read_checked(f.layout.segment, 0, f.layout.segment.num_bytes)
        every = [n for byte in raw for n in (byte >> 4, byte & 15)]
        return every[: f.meta.num_bits]
    gets = [arg for g in positions for arg in ("GET", "u4", f"#{g}")]
    return f.storage.command("BITFIELD_RO", f.layout.segment.keys.bits, *gets) if gets else []


class Model:
    """The same counters in Python: what Redis must hold after the same operations."""

    def __init__(self, f):
        self.f = f
        self.c = [0] * f.meta.num_bits

    def add(self, item):
        pos = positions_of(self.f, item)
        was_new = any(self.c[g] == 0 for g in pos)
        for g in pos:
            self.c[g] = min(MAX, self.c[g] + 1)
        return was_new

    def remove(self, item):
        pos = positions_of(self.f, item)
        before = [self.c[g] for g in pos]
        if 0 in before:
            return False
        for g, v in zip(pos, before, strict=True):
            if v < MAX:
                self.c[g] = max(0, self.c[g] - 1)
        return True

    def contains(self, item):
        return all(self.c[g] for g in positions_of(self.f, item))


# -- the basics -----------------------------------------------------------------------
def test_memory_is_four_times_a_plain_filter_and_stats_say_so():
    plain = django_bloom.create_filter("plain", capacity=1000, error_rate=0.01)
    f = counting()
    assert (f.meta.num_bits, f.meta.num_hashes) == (plain.meta.num_bits, plain.meta.num_hashes)
    m = f.meta.num_bits
    assert (f.key_bytes - 16, plain.key_bytes - 16) == ((4 * m + 7) // 8, (m + 7) // 8)
    f.add_many([f"x{i}" for i in range(100)])
    stats = f.stats()
    assert stats.bits_per_position == 4
    assert plain.stats().bits_per_position == 1
    # bits_set counts counters set, so the usual formulas estimate ~100 items.
    assert stats.bits_set == sum(1 for v in counters(f) if v)
    assert 80 < stats.estimated_items < 120
    assert "4x" in layout_class("counting").description


def test_the_raw_bytes_are_the_counters_bitfield_reads():
    f = counting(capacity=100)
    f.add_many(["a", "b", "c", "a"])
    assert counters(f) == counters(f, range(f.meta.num_bits))
    assert min(counters(f, positions_of(f, "a"))) >= 2  # added twice


def test_batch_answers_equal_single_answers():
    items = ["a", "b", "a", "c", "b", "a", "d"]
    batch, single = counting("batch"), counting("single")
    batch_model, single_model = Model(batch), Model(single)
    assert batch.add_many(items) == [single.add(i) for i in items]
    assert [batch_model.add(i) for i in items] == [single_model.add(i) for i in items]
    removals = ["a", "zz-never", "a", "b", "a", "a", "c"]
    assert batch.remove_many(removals) == [single.remove(i) for i in removals]
    assert [batch_model.remove(i) for i in removals] == [single_model.remove(i) for i in removals]
    probe = ["a", "b", "c", "d", "zz-never"]
    assert batch.contains_many(probe) == [single.contains(i) for i in probe]
    assert counters(batch) == batch_model.c
    assert counters(single) == single_model.c


def test_a_big_batch_goes_in_several_chunks_with_the_same_answers():
    f = counting(capacity=50_000)
    items = [f"i{i}" for i in range(5000)]  # more than one chunk of MAX_BITOPS positions
    model = Model(f)
    # numpy positions (grouped by width in the command): answers put back in item order
    assert f.add_many(items[:2500]) == [model.add(i) for i in items[:2500]]
    answers = f.add_many(items)
    assert answers == [model.add(i) for i in items]
    assert not any(answers[:2500]) and sum(answers[2500:]) > 2400
    assert counters(f) == model.c
    assert f.remove_many(items[:2500]) == [True] * 2500  # added twice: once each now
    assert all(f.contains_many(items))
    assert f.remove_many(items[::2]) == [True] * len(items[::2])
    mixed = f.contains_many(items)  # numpy positions: grouped by width, answers put back
    assert mixed == [f.contains(i) for i in items]
    assert mixed.count(True) < len(items) * 0.6 and all(mixed[1::2])
    assert f.remove_many(items[1::2]) == [True] * len(items[1::2])
    assert not any(f.contains_many(items))
    assert set(counters(f)) == {0}


def test_saturated_counters_are_never_decremented():
    f = counting()
    pos = positions_of(f, "hot")
    for _ in range(20):
        f.add("hot")
    assert counters(f, pos) == [MAX] * len(pos)
    for _ in range(20):
        assert f.remove("hot") is True  # never reaches zero: no false negative, ever
    assert counters(f, pos) == [MAX] * len(pos)
    assert f.contains("hot")


def test_a_shared_counter_at_saturation_keeps_other_items_in():
    f = counting(capacity=20, error_rate=0.3)  # tiny: items share counters
    items = [f"s{i}" for i in range(60)]
    f.add_many(items)
    keep = items[::2]
    f.remove_many(items[1::2])
    assert all(f.contains_many(keep))  # whatever saturated or was shared: no false negative


def test_another_filters_key_is_not_read_as_counters(redis_client):
    f = counting()
    plain = django_bloom.create_filter("plain", capacity=1000, error_rate=0.01)
    # a key of the right length but another filter's trailer (a plain filter 4x as big)
    redis_client.copy(plain.identity[0], f.identity[0], replace=True)
    with pytest.raises(FilterKeyMissing):
        f.add("a")
    with pytest.raises(FilterKeyMissing):
        f.contains("a")


def test_rebuild_builds_counters_like_adds_do(monkeypatch):
    items = [f"r{i}" for i in range(300)] + ["dup", "dup", "dup"]
    built, added = counting("built"), counting("added")
    added.add_many(items)
    in_redis = added.storage.read_checked(added.layout.segment, 0, added.layout.segment.num_bytes)
    for numpy in (hashing.numpy_module(), None):  # the builder's bytes are what the adds made
        with monkeypatch.context() as m:  # in Redis; None: as where numpy is not installed
            m.setattr(hashing, "numpy_module", lambda numpy=numpy: numpy)
            builder = added.layout.builder()
        builder.add(added.hasher.item_digests(items))
        assert bytes(builder.tobytes()) == in_redis
    built.add("stale-item")
    model = Model(built)
    for item in items:
        model.add(item)
    assert built.rebuild(items) == len(items)
    assert counters(built) == model.c  # the stale item's counters are gone
    assert built.remove("dup") and built.remove("dup") and built.remove("dup")
    assert built.remove("dup") is False
    assert built.add("after") is True and built.contains("after")


def test_items_journaled_during_a_rebuild_are_counted_in_the_new_key():
    f = counting()
    other = django_bloom.get_filter("c")
    calls = []

    def during(count):
        if not calls:
            calls.append(other.add_many(["journaled", "journaled"]))

    f.rebuild(["base"], progress=during)
    assert calls
    fresh = django_bloom.get_filter("c", refresh=True)
    pos = positions_of(fresh, "journaled")
    assert min(counters(fresh, pos)) >= 2  # incremented twice by the replay
    assert fresh.remove("journaled") and fresh.remove("journaled")
    assert fresh.contains("base")


# -- the model: random add/remove sequences ---------------------------------------------
ITEMS = st.sampled_from([f"item-{i}" for i in range(12)])
OPS = st.lists(
    st.tuples(
        st.sampled_from(["add", "remove", "add_many", "remove_many"]),
        st.lists(ITEMS, min_size=1, max_size=6),
    ),
    max_size=40,
)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(ops=OPS)
def test_random_sequences_match_the_python_model(ops):
    from django_bloom.models import BloomFilter

    BloomFilter.objects.filter(name="model").delete()
    django_bloom.services.forget_filters()
    # tiny: items share counters and some saturate, which is what the model must capture
    f = django_bloom.create_filter("model", capacity=8, error_rate=0.2, layout="counting")
    try:
        model = Model(f)
        for op, items in ops:
            if op == "add":
                assert f.add(items[0]) == model.add(items[0])
            elif op == "remove":
                assert f.remove(items[0]) == model.remove(items[0])
            elif op == "add_many":
                assert f.add_many(items) == [model.add(i) for i in items]
            else:
                assert f.remove_many(items) == [model.remove(i) for i in items]
            assert counters(f) == model.c
        every = [f"item-{i}" for i in range(12)]
        assert f.contains_many(every) == [model.contains(i) for i in every]
    finally:
        f.delete()


# -- two processes at once -----------------------------------------------------------
WORKER = textwrap.dedent(
    """
    import os, sys
    import django
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")
    django.setup()
    from django.test.utils import override_settings
    from django.conf import settings
    from django_bloom.engine.kinds import layout_class
    from django_bloom.engine.segment import Segment
    from django_bloom.engine.storage import Storage

    prefix, name, m, k, fp, gen, seed_items, rounds = sys.argv[1:9]
    segment = Segment(name, "default", prefix, int(m), int(k), int(fp), gen)
    layout = layout_class("counting").bind(segment)
    storage = Storage("default")
    flat = [int(x) for x in seed_items.split(",")]
    for r in range(int(rounds)):
        layout.add(storage, flat)  # every item once more
        if r:  # and out again: each process keeps one of each (no counter saturates)
            assert all(layout.remove(storage, flat))
    print("ok")
    """
)


def test_two_processes_adding_and_removing_at_once(bloom_prefix, tmp_path):
    import os

    f = counting(capacity=2000)
    items = [f"p{i}" for i in range(10)]
    flat = f.positions(f.hashes(items))
    seg = f.layout.segment
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    rounds = 60
    args = [
        sys.executable,
        str(script),
        bloom_prefix,
        seg.name,
        str(f.meta.num_bits),
        str(seg.num_hashes),
        str(seg.fingerprint),
        seg.generation,
        ",".join(map(str, flat)),
        str(rounds),
    ]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "DJANGO_SETTINGS_MODULE": "tests.settings"}
    procs = [
        subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=ROOT)
        for _ in range(2)
    ]
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err.decode()[-2000:]
    # The model's sum: each process added every item `rounds` times and removed it
    # `rounds - 1` times; no counter saturated, so the order did not matter.
    model = Model(f)
    for _ in range(2):
        for r in range(rounds):
            for item in items:
                model.add(item)
            if r:
                for item in items:
                    assert model.remove(item)
    assert max(model.c) < MAX
    assert counters(f) == model.c
    assert sum(model.c) == 2 * len(flat)


# -- the IP blocklist: unblock takes the entry out of a counting filter ---------------
@pytest.fixture
def counting_blocklist():
    from django_bloom import ipblock as blocklist

    name = "ip-blocklist"
    django_bloom.create_filter(
        name, capacity=1000, error_rate=0.001, kind="blocklist", layout="counting"
    )
    blocklist.forget_caches()
    return django_bloom.get_filter(name, refresh=True)


@pytest.fixture
def unblock(django_capture_on_commit_callbacks):
    """``blocklist.unblock`` with its on-commit removal run (tests run in a transaction)."""
    from django_bloom import ipblock as blocklist

    def run(*args, **kwargs):
        with django_capture_on_commit_callbacks(execute=True):
            return blocklist.unblock(*args, **kwargs)

    return run


def test_unblock_removes_the_entry_from_a_counting_blocklist_at_once(counting_blocklist, unblock):
    from django_bloom import ipblock as blocklist

    f = counting_blocklist
    blocklist.block("203.0.113.7", reason="spam")
    blocklist.block("203.0.113.7", reason="spam again")  # re-block: the row changes, not the count
    assert f.contains("203.0.113.7/32")
    assert unblock("203.0.113.7") == 1
    assert not f.contains("203.0.113.7/32")  # at once, no rebuild
    assert not blocklist.check_ip("203.0.113.7").blocked
    assert set(counters(f)) == {0}
    assert unblock("203.0.113.7") == 0  # no row: nothing removed
    assert set(counters(f)) == {0}


def test_unblocking_one_of_two_overlapping_entries_keeps_the_other_blocking(
    counting_blocklist, unblock
):
    from django_bloom import ipblock as blocklist

    f = counting_blocklist
    for network in ("10.0.0.0/8", "10.1.0.0/16", "10.1.2.3"):
        blocklist.block(network)
    assert blocklist.check_ip("10.1.2.3").network == "10.1.2.3/32"
    unblock("10.1.2.3")
    assert blocklist.check_ip("10.1.2.3").network == "10.1.0.0/16"
    unblock("10.1.0.0/16")
    decision = blocklist.check_ip("10.1.2.3")
    assert decision.blocked and decision.network == "10.0.0.0/8"
    assert f.contains("10.0.0.0/8")
    assert f.contains_many(["10.1.0.0/16", "10.1.2.3/32"]) == [False, False]
    assert unblock("10.0.0.0/8") == 1
    assert not blocklist.check_ip("10.1.2.3").blocked
    assert set(counters(f)) == {0}


def test_an_expired_entry_is_unblocked_without_touching_the_filter(counting_blocklist, unblock):
    """An expired row may have been dropped by a rebuild: removing its item could take
    counts from other entries, so unblock leaves the filter alone."""
    from datetime import timedelta

    from django.utils import timezone

    from django_bloom import ipblock as blocklist
    from django_bloom.models import BlockedEntry

    f = counting_blocklist
    blocklist.block("192.0.2.0/24")
    BlockedEntry.objects.create(
        list_name="ip-blocklist",
        network="198.51.100.0/24",
        expires_at=timezone.now() - timedelta(days=1),
    )
    blocklist.rebuild_blocklist("ip-blocklist")  # builds without the expired row
    before = counters(f)
    assert unblock("198.51.100.0/24") == 1
    assert counters(f) == before
    assert blocklist.check_ip("192.0.2.9").blocked


def test_reimporting_a_netset_does_not_pile_up_counts(counting_blocklist, unblock):
    from django_bloom import ipblock as blocklist

    f = counting_blocklist
    lines = ["192.0.2.0/24", "198.51.100.7"]
    blocklist.import_netset(lines)
    pos = positions_of(f, "192.0.2.0/24") + positions_of(f, "198.51.100.7/32")  # as stored
    once = counters(f, pos)
    assert min(once) >= 1
    for _ in range(2):  # e.g. a daily re-import
        blocklist.import_netset(lines)
    assert counters(f, pos) == once  # entries already listed are not counted again
    unblock("192.0.2.0/24")
    assert not f.contains("192.0.2.0/24")
    assert blocklist.check_ip("198.51.100.7").blocked


def test_a_plain_blocklist_unblock_keeps_the_item(counting_blocklist, unblock):
    from django_bloom import ipblock as blocklist

    django_bloom.create_filter("plain-list", capacity=1000, error_rate=0.001, kind="blocklist")
    blocklist.block("192.0.2.1", list_name="plain-list")
    unblock("192.0.2.1", list_name="plain-list")
    assert django_bloom.get_filter("plain-list").contains("192.0.2.1/32")  # as before
    assert not blocklist.check_ip("192.0.2.1", list_name="plain-list").blocked


def test_a_rolled_back_unblock_leaves_the_filter_alone(
    counting_blocklist, django_capture_on_commit_callbacks
):
    from django.db import transaction

    from django_bloom import ipblock as blocklist

    blocklist.block("203.0.113.9")

    class Rollback(Exception):
        pass

    with django_capture_on_commit_callbacks(execute=True):
        with pytest.raises(Rollback), transaction.atomic():
            assert blocklist.unblock("203.0.113.9") == 1
            raise Rollback  # e.g. a later error in the same request (ATOMIC_REQUESTS)
    assert counting_blocklist.contains("203.0.113.9/32")  # the row stayed: so does the item
    assert blocklist.check_ip("203.0.113.9").blocked


# -- bloom remove ---------------------------------------------------------------------
def test_bloom_remove_command():
    from django.core.management import CommandError, call_command

    f = counting()
    f.add_many(["a", "b"])
    call_command("bloom", "remove", "c", "a", "b")
    assert f.contains_many(["a", "b"]) == [False, False]
    with pytest.raises(SystemExit) as refused:
        call_command("bloom", "remove", "c", "a")
    assert refused.value.code == 1
    django_bloom.create_filter("plain", capacity=100, error_rate=0.01)
    with pytest.raises(CommandError, match="cannot remove"):
        call_command("bloom", "remove", "plain", "a")


def test_admin_memory_says_counting_and_4x():
    from django_bloom.ops.admin_figures import capacity_figures, memory_text

    f = counting()
    f.add("a")
    text = str(memory_text(f.stats()))
    assert "counting: 4 bits per position" in text and "4x" in text
    assert dict(capacity_figures(f.stats()))["memory in Redis"] == text
    plain = django_bloom.create_filter("plain", capacity=1000, error_rate=0.01)
    assert "counting" not in str(memory_text(plain.stats()))


def test_verify_refuses_a_counting_filter_instead_of_misreading_counters(counting_blocklist):
    from django_bloom import ipblock as blocklist
    from django_bloom.ops.verify import verify_filter

    blocklist.block("192.0.2.0/24")
    before = counters(counting_blocklist)
    with pytest.raises(OperationNotSupported, match="counters"):
        verify_filter("ip-blocklist", repair=True)
    assert counters(counting_blocklist) == before


def test_admin_list_notes_counters_under_the_memory_figure(admin_client):
    """The list column stays narrow: the figure, and a quiet line saying why it is 4x."""
    counting().add("a")
    page = admin_client.get("/admin/django_bloom/bloomfilter/").content.decode()
    assert '<br><span class="bloom-quiet">counting, 4x a plain filter</span>' in page
