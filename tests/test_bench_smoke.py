"""The shipped benchmark runs end to end (tiny size, our paths and the naive design).

RedisBloom (the `bench` extra) is not needed here; `make bench` runs the full
comparison. No timing is asserted: only that every workload ran and reported.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_bench_quick_run_writes_a_complete_report(tmp_path):
    out, png = tmp_path / "latest.json", tmp_path / "ratios.png"
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench",
            "--quick",
            "--no-anchor",
            "--n",
            "5000",
            "--out",
            str(out),
            "--chart",
            str(png),
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
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
    ):
        assert results[name]["ours"] > 0, name
    assert results["single contains (ops/s)"]["naive"] > 0
    assert results["server time per batch add item (us)"]["ours"] > 0  # commandstats were read
    assert "ratio = ours / RedisBloom" in done.stdout


def test_floor_commands_are_valid_and_their_replies_are_read_whole(redis_client, bloom_prefix):
    """bench.floor times prebuilt commands; each must be accepted and fully read."""
    import random
    import socket

    from bench import floor

    redis_client.setrange(f"{bloom_prefix}:std", floor.STANDARD[0] // 8, b"\0")
    redis_client.setrange(f"{bloom_prefix}:blk", floor.BLOCKED_WORDS * 8, b"\0")
    kwargs = redis_client.connection_pool.connection_kwargs
    with socket.create_connection((kwargs["host"], kwargs["port"])) as sock:
        sock.sendall(floor.command("SELECT", kwargs.get("db", 0)))
        assert sock.recv(16) == b"+OK\r\n"
        designs = floor.designs(random.Random(1), prefix=bloom_prefix)
        assert len(designs) == 7
        for name, (payload, elements) in designs.items():
            if name.startswith("BF."):
                continue  # RedisBloom is not loaded in the test Redis
            assert floor.round_trip(sock, payload, elements) > 0
            sock.sendall(floor.command("PING"))
            assert sock.recv(16) == b"+PONG\r\n", name  # nothing of the reply was left unread
    # the add designs really set bits (k=7 standard, then k=3 and k=6 blocked)
    assert redis_client.bitcount(f"{bloom_prefix}:std") > 6000
    assert redis_client.bitcount(f"{bloom_prefix}:blk") > 8000
