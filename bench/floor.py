"""The floor: what Redis itself costs for each batch design, with no client work at all.

    python -m bench.floor [--rounds 20]

Every command is built before the clock starts and sent on a raw socket; the
reply is read as bytes and not parsed. So a design's time here is the least
any client, in any language, could spend on it, and

    best reachable ratio = RedisBloom's time through redis-py / the design's floor

is the ceiling of the ratio `python -m bench` can print for that design (the
bench calls RedisBloom through redis-py, as a Django site would). Designs are
measured in alternation, round after round, on one private redis-server with
RedisBloom loaded; the table shows medians.
"""

from __future__ import annotations

import argparse
import random
import socket
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.anchor import AnchorServer, module_path  # noqa: E402

BATCH = 1000
STANDARD = (9_585_059, 7)  # n = 1e6, p = 0.01: the default layout
BLOCKED_WORDS = 14_388_224 // 64  # the blocked layout at the same (n, p), k = 3


def command(*args) -> bytes:
    out = [b"*%d\r\n" % len(args)]
    for arg in args:
        arg = arg if isinstance(arg, bytes) else str(arg).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(arg), arg))
    return b"".join(out)


def round_trip(sock: socket.socket, payload: bytes, elements: int) -> float:
    """Send one command, read its array reply of ``elements`` integers; seconds taken."""
    start = time.perf_counter()
    sock.sendall(payload)
    buf = bytearray()
    while buf.count(b"\r\n") < elements + 1:
        chunk = sock.recv(1 << 20)
        if not chunk:
            raise ConnectionError("redis closed the connection")
        buf += chunk
    if buf[:1] != b"*":
        raise RuntimeError(f"unexpected reply: {bytes(buf[:80])!r}")
    return time.perf_counter() - start


def designs(rng: random.Random, prefix: str = "floor") -> dict[str, tuple[bytes, int]]:
    """One round's prebuilt commands: name -> (payload, reply elements)."""
    bf, std, blk = f"{prefix}:bf", f"{prefix}:std", f"{prefix}:blk"
    m, k = STANDARD
    items = [f"floor-{rng.random()}" for _ in range(BATCH)]

    def bits(op: str, count: int, limit: int, *value) -> list:
        args = []
        for _ in range(count):
            args += [op, "u1", rng.randrange(limit), *value]
        return args

    words = []
    for _ in range(BATCH):
        words += ["GET", "i64", f"#{rng.randrange(BLOCKED_WORDS)}"]
    return {
        "BF.MEXISTS": (command("BF.MEXISTS", bf, *items), BATCH),
        "BF.MADD": (command("BF.MADD", bf, *items), BATCH),
        f"standard contains: BITFIELD_RO, {k * BATCH} GET u1": (
            command("BITFIELD_RO", std, *bits("GET", k * BATCH, m)),
            k * BATCH,
        ),
        f"standard add: BITFIELD, {k * BATCH} SET u1": (
            command("BITFIELD", std, *bits("SET", k * BATCH, m, 1)),
            k * BATCH,
        ),
        f"blocked contains: BITFIELD_RO, {BATCH} GET i64": (
            command("BITFIELD_RO", blk, *words),
            BATCH,
        ),
        f"blocked add (k=3): BITFIELD, {3 * BATCH} SET u1": (
            command("BITFIELD", blk, *bits("SET", 3 * BATCH, BLOCKED_WORDS * 64, 1)),
            3 * BATCH,
        ),
        f"blocked add (k=6, most compact): BITFIELD, {6 * BATCH} SET u1": (
            command("BITFIELD", blk, *bits("SET", 6 * BATCH, BLOCKED_WORDS * 64, 1)),
            6 * BATCH,
        ),
    }


def measure(url: str, rounds: int) -> dict[str, float]:
    import redis

    client = redis.Redis.from_url(url)
    client.execute_command("BF.RESERVE", "floor:bf", 0.01, 1_000_000)
    client.setrange("floor:std", STANDARD[0] // 8, b"\0")
    client.setrange("floor:blk", BLOCKED_WORDS * 8, b"\0")
    host, port = (
        client.connection_pool.connection_kwargs["host"],
        client.connection_pool.connection_kwargs["port"],
    )
    sock = socket.create_connection((host, port))
    rng = random.Random(7)
    times: dict[str, list[float]] = {}
    for _ in range(rounds):
        batch = designs(rng)
        for name, (payload, elements) in batch.items():
            times.setdefault(name, []).append(round_trip(sock, payload, elements))
        items = [f"floor-py-{rng.random()}" for _ in range(BATCH)]
        for name in ("BF.MEXISTS", "BF.MADD"):
            start = time.perf_counter()
            client.execute_command(name, "floor:bf", *items)
            times.setdefault(f"{name} via redis-py", []).append(time.perf_counter() - start)
    sock.close()
    return {name: statistics.median(values) for name, values in times.items()}


def table(medians: dict[str, float]) -> str:
    lines = [f"{'command (1,000 items)':<60}{'median ms':>10}{'best reachable ratio':>22}"]
    lines.append("-" * len(lines[0]))
    for name, seconds in medians.items():
        anchor = "BF.MADD" if "add" in name or "MADD" in name else "BF.MEXISTS"
        ceiling = medians[f"{anchor} via redis-py"] / seconds
        shown = "—" if name.startswith("BF.") else f"{ceiling:.2f}x of {anchor}"
        lines.append(f"{name:<60}{seconds * 1e3:>10.3f}{shown:>22}")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.floor", description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=20)
    args = ap.parse_args(argv)
    module = module_path()
    if module is None:
        print("RedisBloom not found: pip install -e '.[bench]'", file=sys.stderr)
        return 2
    with AnchorServer(module) as url:
        medians = measure(url, args.rounds)
    print(table(medians))
    return 0


if __name__ == "__main__":
    sys.exit(main())
