"""A blocklist rebuilt on a SQLite FILE database while threads block addresses, as
``bloom rebuild blocklist`` does while the admin or an abuse hook writes entries.

On the old code both failed with "database is locked": ``block()`` (and ``unblock``,
``import_netset``) read the list's row, then wrote, in one deferred transaction, and
SQLite refuses at once to upgrade a read lock while another connection writes (three
threads blocking at once were enough); and the rebuild read its entries through one
open cursor (``.iterator()``), whose read lock keeps every writer waiting until its last
row. Now the write lock comes first (``db_access.write_transaction``) and the rebuild reads in
keyset pages (``db_access.keyset_pages``). Meanwhile a thread counts refused requests and
the counters' writer thread writes those hits every 50 ms (``ipblock.hits``, under the
same write lock): none may fail, none may be lost. Runs in its own process (a file
database, real threads, real Redis).
"""

import json

import pytest

SCRIPT = r"""
import json, logging, threading, time
from django.db import connection
from django_bloom import ipblock
from django_bloom.ipblock import hits
from django_bloom.models import BlockedEntry
from django_bloom import counters

counters.FLUSH_SECONDS = 0.05  # the writer thread writes hits while the others write
failed_flushes = []
logging.getLogger("django_bloom.blocklist").addHandler(
    type("H", (logging.Handler,), {"emit": lambda self, r: failed_flushes.append(r.getMessage())})()
)

connection.settings_dict["OPTIONS"] = {"timeout": 5}  # sqlite3's default (the fixture: 30)

BlockedEntry.objects.bulk_create(
    BlockedEntry(list_name="ip-blocklist", network=f"10.{i >> 16}.{i >> 8 & 255}.{i & 255}/32")
    for i in range(__ROWS__)
)
ipblock.ensure_blocklist_filter()  # created and filled from the rows
connection.close()
errors, saved, started = [], [], threading.Event()

def writer(w):
    from django.db import connections
    try:
        started.wait()
        for i in range(40):
            address = f"192.0.{w}.{i}"
            ipblock.block(address, reason="abuse")
            saved.append(address)
            time.sleep(0.01)
    except Exception as exc:
        errors.append(f"writer: {type(exc).__name__}: {exc}")
    finally:
        connections["default"].close()

def refuser():
    from django.db import connections
    try:
        started.wait()
        entry = BlockedEntry.objects.get(network="10.0.0.5/32")
        for i in range(300):
            hits.record(entry)
            time.sleep(0.002)
    except Exception as exc:
        errors.append(f"refuser: {type(exc).__name__}: {exc}")
    finally:
        connections["default"].close()

threads = [threading.Thread(target=writer, args=(w,)) for w in range(3)]
threads.append(threading.Thread(target=refuser))
for t in threads:
    t.start()
rebuilds = 0
while any(t.is_alive() for t in threads) or rebuilds < 2:
    started.set()
    try:
        ipblock.rebuild_blocklist()
    except Exception as exc:
        errors.append(f"rebuild: {type(exc).__name__}: {exc}")
    rebuilds += 1
for t in threads:
    t.join()
counters.flush_all()
print(json.dumps({
    "errors": errors + [m for m in failed_flushes if "could not" in m],
    "hits": BlockedEntry.objects.get(network="10.0.0.5/32").hits,
    "saved": len(saved),
    "blocked": sum(ipblock.check_ip(a).blocked for a in saved),
    "rebuilds": rebuilds,
}))
"""


@pytest.mark.slow  # a process of its own: ~10 s
def test_blocking_addresses_during_a_rebuild_succeeds_on_a_sqlite_file(django_process):
    def done(proc):
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err
        return out

    done(django_process("migrate", "-v", "0"))
    script = SCRIPT.replace("__ROWS__", "60000")
    report = json.loads(done(django_process("shell", "-c", script)).strip().splitlines()[-1])
    assert report["errors"] == [], "\n".join(report["errors"])
    assert report["saved"] == 120 and report["rebuilds"] >= 2
    assert report["blocked"] == 120  # every address blocked meanwhile is blocked after
    assert report["hits"] == 300  # every refusal counted, written by the writer thread
