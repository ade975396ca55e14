"""The kinds that run Lua scripts (counting, rotating, scalable, families) load them again
after Redis lost its script cache (a restart, SCRIPT FLUSH): ``Storage.run_scripts`` is
the one place that does it, for single items and batches, adds and reads."""

import pytest

import django_bloom

pytestmark = pytest.mark.django_db

SCRIPTED = [
    pytest.param({"layout": "counting"}, id="counting"),
    pytest.param({"layout": "rotating"}, id="rotating"),
    pytest.param({"layout": "scalable"}, id="scalable"),
    pytest.param({"family": True}, id="family"),
]


def handle(name, **kind):
    f = django_bloom.create_filter(name, capacity=1000, **kind)
    return f.member("user-1") if kind.get("family") else f


@pytest.mark.parametrize("kind", SCRIPTED)
def test_a_lost_script_cache_is_refilled_and_nothing_answers_absent(kind, redis_client):
    f = handle("scripted", **kind)
    assert f.add("before") is True
    redis_client.script_flush()
    assert f.add("single") is True  # NOSCRIPT: nothing ran; loaded, sent again
    redis_client.script_flush()
    batch = [f"batch-{i}" for i in range(300)]
    f.add_many(batch)
    redis_client.script_flush()
    assert f.contains("before") and f.contains("single")
    redis_client.script_flush()
    assert f.contains_many(["before", "single", *batch]) == [True] * 302
    assert f.add("single") is False  # and the single add was applied once, not lost
