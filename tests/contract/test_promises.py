"""What every kind promises, run for every kind the registry holds (conftest.py): add
says whether an item was new; no added item ever reads absent, whichever path wrote or
reads it; a batch answers as single items do; at capacity the stats and the measured
false-positive rate stay in bounds; a lost key raises; bad input is refused and writes
nothing; clear empties, delete leaves no key. A kind's own file tests what only it does."""

import asyncio
import threading

import pytest

import django_bloom
from django_bloom.engine.sizing import MAX_CAPACITY
from django_bloom.exceptions import FilterKeyMissing, FilterNotFound
from django_bloom.models import BloomFilter
from tests.contract.conftest import CAPACITY, ERROR_RATE, items

pytestmark = pytest.mark.django_db

STRANGERS = items("stranger", 2000)


def test_add_says_whether_an_item_was_new(kind, make):
    f = make()
    assert f.add("seen") is True
    assert f.add("seen") is False
    assert f.add_many(["a", "b", "a", "seen"]) == [True, True, False, False]
    assert f.add_many([]) == [] and f.add_many(["c", "d"], count=True) == 2

    async def scenario():
        return await f.aadd("e"), await f.aadd("e"), await f.aadd_many(["f", "e", "f"])

    assert asyncio.run(scenario()) == (True, False, [True, False, False])


def test_no_added_item_ever_reads_absent_and_a_batch_answers_as_single_items(kind, make):
    f = make()
    single, batch, late = items("single", 50), items("batch", 400), items("async", 50)
    for item in single:
        f.add(item)
    f.add_many(batch)

    async def add_then_read():
        for item in late[:10]:
            await f.aadd(item)
        await f.aadd_many(late[10:])
        return await f.acontains_many(everything), [await f.acontains(i) for i in late]

    everything = single + batch + late
    from_async, singles_async = asyncio.run(add_then_read())
    other = django_bloom.get_filter("c", refresh=True)  # another handle, as another process
    assert all(from_async) and all(singles_async)
    assert all(f.contains_many(everything)) and all(other.contains_many(everything))
    assert all(f.contains(i) for i in everything[::7]) and all(i in other for i in late)
    probes = everything[::3] + STRANGERS[:600]
    answers = f.contains_many(probes)
    assert [f.contains(p) for p in probes] == answers == other.contains_many(probes)
    assert 0 < answers[-600:].count(False)  # strangers mostly absent


def test_at_capacity_the_stats_and_the_false_positive_rate_stay_in_bounds(kind, make):
    """The kind's geometry meets the error rate by its own formula (k a whole number: within
    5%), and so does the filter: measured on 20,000 strangers (about 200 expected false
    positives at 1%; the bound, 1.5x, is over six standard deviations away)."""
    f = make()
    expected = f.meta.layout_class().expected_fpr(f.meta.num_bits, CAPACITY, f.meta.num_hashes)
    assert expected <= 1.05 * ERROR_RATE
    f.add_many(items("in", CAPACITY))
    stats = f.stats()
    assert 0.9 * CAPACITY <= stats.estimated_items <= 1.1 * CAPACITY
    assert 0 < stats.bits_set <= stats.details.get("num_bits", stats.num_bits)
    assert 0 < stats.current_fpr <= 1.5 * ERROR_RATE
    assert 0.9 <= stats.capacity_used <= 1.1 and stats.key_bytes == f.key_bytes
    assert stats.memory_bytes is None or stats.memory_bytes > 0
    measured = f.contains_many(items("out", 20_000), count=True) / 20_000
    assert measured <= 1.5 * ERROR_RATE


def test_a_lost_key_raises_and_is_never_made_again_by_a_write(kind, make, keys):
    f = make()
    f.add_many(items("kept", 20))
    keys.lose()  # as a Redis restarted without its data
    for operation, argument in [
        (f.contains, "kept-1"), (f.add, "kept-1"),
        (f.contains_many, ["kept-1", "kept-2"]), (f.add_many, ["kept-1", "new"]),
    ]:  # fmt: skip
        with pytest.raises(FilterKeyMissing):
            operation(argument)
    with pytest.raises(FilterKeyMissing):
        asyncio.run(f.acontains("kept-1"))
    with pytest.raises(FilterKeyMissing):
        f.stats()
    assert keys() == []  # the refused writes made nothing


@pytest.mark.parametrize(
    "bad", [object(), None, 1.5, "lone \ud800 surrogate"], ids=["object", "None", "float", "text"]
)
def test_bad_items_are_refused_and_write_nothing(kind, make, keys, bad):
    f = make()
    f.add("there")
    before = keys.dump()
    for operation in (f.add, f.contains):
        with pytest.raises((TypeError, ValueError)):
            operation(bad)
    for operation in (f.add_many, f.contains_many):
        with pytest.raises((TypeError, ValueError)):
            operation(["fine", bad])
    with pytest.raises((TypeError, ValueError)):
        asyncio.run(f.aadd_many(["fine", bad]))
    assert keys.dump() == before


@pytest.mark.parametrize(
    "arguments",
    [{"capacity": 0}, {"capacity": MAX_CAPACITY}, {"error_rate": 1.5}, {"options": {"typo": 1}}],
    ids=["no-capacity", "absurd-capacity", "rate", "option"],
)
def test_a_bad_create_is_refused_and_writes_nothing(kind, make, keys, arguments):
    with pytest.raises(ValueError):
        make("refused", **arguments)
    assert keys() == [] and not BloomFilter.objects.filter(name="refused").exists()


def test_a_lost_script_cache_is_refilled_and_nothing_reads_absent(kind, make, keys):
    """A kind that runs Lua scripts loads them again (``Storage.run_scripts``) after the
    server lost them (a restart, SCRIPT FLUSH), for single items and batches."""
    f, batch = make(), items("batch", 300)
    assert f.add("before") is True
    keys.flush_scripts()
    assert f.add("single") is True  # NOSCRIPT: nothing ran; loaded, sent again
    keys.flush_scripts()
    f.add_many(batch)
    keys.flush_scripts()
    assert f.contains("before") and f.contains("single")
    keys.flush_scripts()
    assert f.contains_many(["before", "single", *batch]) == [True] * 302
    assert f.add("single") is False  # and the single add was applied once, not lost


def test_concurrent_adds_of_one_item_say_new_exactly_once(kind, make):
    f = make()
    for round_ in range(3):
        wins, barrier = [], threading.Barrier(5)

        def worker(round_=round_, wins=wins, barrier=barrier):
            barrier.wait()
            wins.append(f.add(f"race-{round_}"))

        threads = [threading.Thread(target=worker) for _ in range(5)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert wins.count(True) == 1, wins


def test_clear_empties_the_filter_and_delete_leaves_no_key(kind, make, keys):
    f = make()
    added = items("gone", 200)
    f.add_many(added)
    f.clear()
    assert not any(f.contains_many(added))
    assert f.add("after") is True and f.contains("after")
    assert django_bloom.get_filter("c", refresh=True).contains("after")
    f.delete()
    assert keys() == []
    with pytest.raises(FilterNotFound):
        django_bloom.get_filter("c", refresh=True)
