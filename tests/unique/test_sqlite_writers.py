"""A bound filter on a SQLite FILE database (where many sites start): rebuilds while four
threads save rows of its model, as ``bloom rebuild`` does during sign-ups.

On the old code ``rebuild_from_source`` raised ``OperationalError: database is locked``:
``boundkeys.upsert_queryset`` read a chunk and then wrote its keys in one deferred
transaction, and SQLite refuses to upgrade a read lock while another connection writes
(at once: the busy timeout does not apply). The filter was then marked failed though its
bits were rebuilt. Runs in its own process (a file database, real threads, real Redis).

With more rows than one chunk of the source query (40,000, as ``bloom rebuild emails
--capacity 200000`` of issue 28, seam 4) the old code failed again: the rebuild wrote its
progress on the row while the source query's cursor was still open (a read lock it then
had to upgrade), "database is locked" within 0.3 s."""

import json

import pytest

SCRIPT = r"""
import json, threading
from django.test.utils import override_settings
import django_bloom
from django_bloom.models import BloomFilter
from django_bloom.unique import sync
from tests.testapp.models import Account

config = {
    "KEY_PREFIX": __PREFIX__,
    "BINDINGS": {"emails": {"source": "testapp.Account.email", "normalizer": "email_ci",
                            "capacity": 20000, "error_rate": 0.01}},
}
with override_settings(DJANGO_BLOOM=config):
    Account.objects.bulk_create(
        Account(username=f"seed{i}", email=f"Seed{i}@Example.org") for i in range(__SEED__)
    )
    sync.ensure_bound_filters()
    sync.connect_bindings()
    errors, saved = [], []

    def writer(w):
        from django.db import connection
        try:
            for i in range(150):
                email = f"User{w}-{i}@Example.org"
                Account.objects.create(username=f"u{w}-{i}", email=email)
                saved.append(email)
        except Exception as exc:
            errors.append(f"writer: {type(exc).__name__}: {exc}")
        finally:
            connection.close()

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(4)]
    for t in threads:
        t.start()
    rebuilds = 0
    while any(t.is_alive() for t in threads) or rebuilds < 2:
        try:
            sync.rebuild_from_source("emails", **__RESIZE__)
        except Exception as exc:
            errors.append(f"rebuild: {type(exc).__name__}: {exc}")
        rebuilds += 1
    for t in threads:
        t.join()
    f = django_bloom.get_filter("emails")
    row = BloomFilter.objects.get(name="emails")
    print(json.dumps({
        "errors": errors,
        "rebuilds": rebuilds,
        "saved": len(saved),
        "state": row.rebuild_state,
        "present": all(f.contains_many([e.lower() for e in saved])),
        "keys": sync.boundkeys.BoundKey.objects.filter(binding="emails").count(),
    }))
"""


@pytest.mark.slow  # a process of its own: ~10 s (40,000 rows: ~30 s on a busy machine)
@pytest.mark.parametrize(
    "seed, resize", [(3000, {}), (40_000, {"capacity": 200_000})], ids=["3000", "40000"]
)
def test_rebuilds_and_saves_of_a_bound_model_succeed_on_a_sqlite_file(
    django_process, bloom_prefix, seed, resize
):
    def done(proc):
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err
        return out

    done(django_process("migrate", "-v", "0"))
    script = SCRIPT.replace("__PREFIX__", repr(bloom_prefix)).replace("__SEED__", str(seed))
    script = script.replace("__RESIZE__", repr(resize))
    report = json.loads(done(django_process("shell", "-c", script)).strip().splitlines()[-1])
    assert report["errors"] == []
    assert report["saved"] == 600 and report["rebuilds"] >= 2
    assert report["state"] == "done"
    assert report["present"] is True  # every saved row's value answers "maybe"
    assert report["keys"] == seed + 600  # every row has its bound key
