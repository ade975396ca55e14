"""The local mirror after a rewind of one key (issue 28 seam 2): never "absent".

``RESTORE key 0 <an older DUMP> REPLACE`` (a key restored from a backup) or
``DEBUG RELOAD NOSAVE`` of an older RDB leaves the server's identity as it was, and
once another process adds Y the key's write counter is back at the value the copy
was loaded at. The copy's version must still differ: every write stamps the
trailer with a random value, which a rewind plus later writes does not bring back.
"""

import time

import pytest
from asgiref.sync import async_to_sync
from django.test import override_settings

import django_bloom
from django_bloom.engine import mirror
from django_bloom.engine.format import TRAILER
from tests.engine.test_mirror_tracking import add_from_another_process, registered

pytestmark = pytest.mark.django_db

READS_SECONDS = 1.0  # reads after the rewind; each must answer True


def mirrored(bloom_prefix: str, how: str):
    polling = how == "polling"
    return override_settings(
        DJANGO_BLOOM={
            "KEY_PREFIX": bloom_prefix,
            "MIRROR_FILTERS": ["hot"],
            "MIRROR_REFRESH_SECONDS": 0 if polling else 3600,
            "MIRROR_TRACKING": not polling,
        }
    )


def counter(client, f) -> int:
    return TRAILER.unpack(client.getrange(f.layout.segment.keys.bits, -16, -1))[2]


def loaded_one_write_ahead(f, how: str):
    """One more add after the state a rewind goes back to, and the copy loaded with it."""
    copy = mirror.mirror_for(f)
    if how == "tracking":
        registered(f)
    f.add("lost-by-the-rewind")
    assert f.contains("lost-by-the-rewind") and copy.loads >= 1
    return copy


def answers_true_after_the_rewind(f, client, copy, how: str, at_counter: int) -> None:
    """Another process adds Y: the counter is back at the copy's; every read says True."""
    before = copy.checked_invalidations
    add_from_another_process(_url(client), f, "added-after-the-rewind")
    assert counter(client, f) == at_counter  # the counter alone cannot tell
    if how == "tracking":  # the pushes of the rewind and the add reach the listener
        deadline = time.monotonic() + 15
        while copy.invalidations == before:
            assert time.monotonic() < deadline, "no invalidation arrived"
            time.sleep(0.005)
    deadline = time.monotonic() + READS_SECONDS
    while time.monotonic() < deadline:
        assert f.contains("added-after-the-rewind") is True
        assert f.contains("saved") is True


def _url(client) -> str:
    kwargs = client.connection_pool.connection_kwargs
    return f"redis://{kwargs['host']}:{kwargs['port']}/{kwargs.get('db', 0)}"


@pytest.mark.parametrize("how", ["tracking", "polling"])
def test_a_key_restored_from_an_older_dump_never_answers_absent(bloom_prefix, redis_client, how):
    with mirrored(bloom_prefix, how):
        f = django_bloom.create_filter("hot", capacity=1000)
        key = f.layout.segment.keys.bits
        f.add("saved")
        backup = redis_client.dump(key)
        copy = loaded_one_write_ahead(f, how)
        at = counter(redis_client, f)
        redis_client.restore(key, 0, backup, replace=True)
        answers_true_after_the_rewind(f, redis_client, copy, how, at)


@pytest.mark.slow
@pytest.mark.parametrize("how", ["tracking", "polling"])
def test_a_debug_reload_of_an_older_rdb_never_answers_absent(
    redis_server, cache_alias, bloom_prefix, how
):
    server = redis_server("--enable-debug-command", "local")
    alias = cache_alias("reloaded", server.url)
    client = server.client()
    with mirrored(bloom_prefix, how):
        f = django_bloom.create_filter("hot", capacity=1000, cache_alias=alias)
        f.add("saved")
        client.save()  # the RDB: one write behind what the copy will hold
        copy = loaded_one_write_ahead(f, how)
        at = counter(client, f)
        identity = client.info("server")["run_id"]
        client.execute_command("DEBUG", "RELOAD", "NOSAVE")
        assert client.info("server")["run_id"] == identity  # the server looks the same
        answers_true_after_the_rewind(f, client, copy, how, at)


def test_every_write_draws_a_new_stamp(bloom_prefix, redis_client):
    """Create, add (single, batch, async), clear and rebuild each leave a stamp of their
    own (24 random bits: seven draws collide by a 1 in 800,000 chance); the counter
    still counts one per command."""
    f = django_bloom.create_filter("stamped", capacity=1000)
    key = f.layout.segment.keys.bits

    def trailer():
        raw = redis_client.getrange(key, -16, -1)
        return raw[5:8], TRAILER.unpack(raw)[2]

    seen = [trailer()]
    f.add("one")
    seen.append(trailer())
    f.add_many([f"item-{i}" for i in range(50)])
    seen.append(trailer())
    async_to_sync(f.aadd)("async")
    seen.append(trailer())
    async_to_sync(f.aadd_many)(["a1", "a2"])
    seen.append(trailer())
    f.clear()
    seen.append(trailer())
    f.rebuild(["rebuilt"])
    seen.append(trailer())
    stamps, counters = zip(*seen, strict=True)
    assert len(set(stamps)) == len(stamps), stamps
    assert counters[:6] == (0, 1, 2, 3, 4, 5) and counters[6] > 5, counters
