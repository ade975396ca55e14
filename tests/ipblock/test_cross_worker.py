"""A write made in one process reaches every other worker within the stated bound.

The bound (docs/blocklist.md): a worker's checks read its local copy of the filter (the
mirror); its caches (prefix lengths, confirmations, the allowlist) are dropped whenever
that copy changes, and every write touches the filter again once its transaction has
committed. So a block, an unblock or an allowlist change made elsewhere applies within
``MIRROR_REFRESH_SECONDS`` (here the worker's clock is moved past it: no waiting), and
within milliseconds where Redis pushes invalidations (``MIRROR_TRACKING``).

Before: a worker kept the prefix lengths in use and its confirmations for 60 s
(``PREFIX_LENGTHS_TTL``, ``CONFIRM_CACHE_TTL``): a network of a new prefix length, an
unblock, or a block whose filter write another worker saw before its commit stayed
unseen for up to a minute. The worker is a process of its own; each writer is a child
it forks (its own copy of everything), so nothing is shared but Redis and the database.
"""

import json

import pytest

SCRIPT = r"""
import json, multiprocessing, time
from django.db import connections, transaction
from django.test import override_settings
from django_bloom import ipblock

offset = [0.0]
real_monotonic = time.monotonic
time.monotonic = lambda: real_monotonic() + offset[0]  # the worker's clock, moved at will
results = {}

def elsewhere(write, hold=None):
    # Run ``write`` in a forked child: another process. ``hold``: a check this worker runs
    # while the child's transaction is open (its filter write done, its rows not committed).
    connections.close_all()
    ctx = multiprocessing.get_context("fork")
    written, go = ctx.Event(), ctx.Event()

    def child():
        with transaction.atomic():
            write()
            written.set()
            go.wait(60)
        connections.close_all()

    proc = ctx.Process(target=child)
    proc.start()
    assert written.wait(60)
    if hold is not None:
        hold()
    go.set()
    proc.join(60)
    assert proc.exitcode == 0

def after_refresh(address):
    offset[0] += 5.01  # MIRROR_REFRESH_SECONDS (5 s) later; the TTLs (60 s) are far
    return ipblock.check_ip(address).reason

with override_settings(DJANGO_BLOOM={**__BLOOM__, "MIRROR_TRACKING": False}):
    ipblock.block("203.0.113.0/24")
    assert not ipblock.check_ip("198.51.100.7").blocked   # warm: lengths {24}, copy loaded
    elsewhere(lambda: ipblock.block("198.51.100.0/27"))    # a new prefix length
    results["new length"] = after_refresh("198.51.100.7")
    elsewhere(lambda: ipblock.unblock("198.51.100.0/27"))
    results["unblocked"] = after_refresh("198.51.100.7")
    elsewhere(lambda: ipblock.allow("203.0.113.0/28"))
    results["allowed"] = after_refresh("203.0.113.5")
    elsewhere(lambda: ipblock.block("2001:db8::/32"))      # the first IPv6 entry
    results["first v6"] = after_refresh("2001:db8::1")
    # The filter written, the rows not yet committed, when this worker reloads its copy:
    elsewhere(lambda: ipblock.block("192.0.2.0/25"),
              hold=lambda: results.__setitem__("before commit", after_refresh("192.0.2.1")))
    results["after commit"] = after_refresh("192.0.2.1")

with override_settings(DJANGO_BLOOM={**__BLOOM__, "MIRROR_TRACKING": True}):
    assert not ipblock.check_ip("198.18.0.1").blocked     # the listener now watches
    elsewhere(lambda: ipblock.block("198.18.0.0/30"))
    started = real_monotonic()
    while not ipblock.check_ip("198.18.0.1").blocked:     # the clock stands still
        assert real_monotonic() - started < 60, "the invalidation never came"
        time.sleep(0.001)
    results["tracked ms"] = round((real_monotonic() - started) * 1000, 1)
print(json.dumps(results))
"""


@pytest.mark.slow  # a process of its own and six forked writers: ~3 s
def test_writes_elsewhere_reach_this_worker_within_the_bound(django_process, bloom_prefix):
    def done(proc):
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err
        return out

    done(django_process("migrate", "-v", "0"))
    script = SCRIPT.replace("__BLOOM__", repr({"KEY_PREFIX": bloom_prefix}))
    results = json.loads(done(django_process("shell", "-c", script)).strip().splitlines()[-1])
    print(f"tracked: the other worker refused after {results.pop('tracked ms')} ms")
    assert results == {
        "new length": "listed",
        "unblocked": "not listed",
        "allowed": "allowlisted",
        "first v6": "listed",
        "before commit": "not listed",
        "after commit": "listed",
    }
