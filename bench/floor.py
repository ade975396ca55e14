"""The floor: what Redis itself costs for each batch design, with no client work at all.

    python -m bench.floor [--n 1000000] [--p 0.01] [--rounds 20]

Every command is built before the clock starts and sent on a raw socket; the
reply is read as bytes and not parsed. So a design's time here is the least
any client, in any language, could spend on it, and

    ceiling = RedisBloom's time through redis-py / the design's floor

is the highest ratio `python -m bench` can print for that design (the bench
calls RedisBloom through redis-py, as a Django site would). `python -m bench`
times these commands too, interleaved with its own batches, and prints each
batch row's ceiling beside its ratio. Here the designs are measured in turn,
round after round, on one redis-server with RedisBloom loaded; the results
are medians.
"""

from __future__ import annotations

import argparse
import random
import socket
import statistics
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.anchor import AnchorServer, module_path  # noqa: E402
from django_bloom.engine import sizing  # noqa: E402
from django_bloom.engine.kinds.blocked import blocked_geometry  # noqa: E402

BATCH = 1000


@dataclass(frozen=True)
class Geometry:
    """Bits and hashes of each layout for one (n, p)."""

    std_bits: int
    std_k: int
    blk_bits: int
    blk_k: int
    compact_k: int  # the blocked layout's most compact k (what k = 3 is traded against)
    compact_bits: int

    @classmethod
    def of(cls, n: int, p: float) -> Geometry:
        std_bits, std_k = sizing.standard_geometry(n, p)
        blk_bits, blk_k = blocked_geometry(n, p)
        compact_bits, compact_k = blocked_geometry(n, p, slack=1.0)
        return cls(std_bits, std_k, blk_bits, blk_k, compact_k, compact_bits)

    def labels(self) -> dict[str, str]:
        return {
            "std_contains": f"standard contains: BITFIELD_RO, {self.std_k * BATCH:,} GET u1",
            "std_add": f"standard add: BITFIELD, {self.std_k * BATCH:,} SET u1",
            "blk_contains": f"blocked contains: BITFIELD_RO, {BATCH:,} GET i64",
            "blk_add": f"blocked add (k={self.blk_k}): BITFIELD, {self.blk_k * BATCH:,} SET u1",
            "blk_add_compact": (
                f"blocked add (k={self.compact_k}, most compact): "
                f"BITFIELD, {self.compact_k * BATCH:,} SET u1"
            ),
        }


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


def build(role: str, rng: random.Random, geo: Geometry, prefix: str) -> tuple[bytes, int]:
    """One prebuilt command for ``role`` (random items or offsets): (payload, reply elements)."""
    if role in ("BF.MEXISTS", "BF.MADD"):
        items = [f"floor-{rng.random()}" for _ in range(BATCH)]
        return command(role, f"{prefix}:bf", *items), BATCH
    if role == "blk_contains":
        words = []
        for _ in range(BATCH):
            words += ["GET", "i64", f"#{rng.randrange(geo.blk_bits // 64)}"]
        return command("BITFIELD_RO", f"{prefix}:blk", *words), BATCH
    name, key, bits, k, op, value = {
        "std_contains": ("BITFIELD_RO", "std", geo.std_bits, geo.std_k, "GET", ()),
        "std_add": ("BITFIELD", "std", geo.std_bits, geo.std_k, "SET", (1,)),
        "blk_add": ("BITFIELD", "blk", geo.blk_bits, geo.blk_k, "SET", (1,)),
        "blk_add_compact": (
            "BITFIELD",
            "blk-compact",
            geo.compact_bits,
            geo.compact_k,
            "SET",
            (1,),
        ),
    }[role]
    args = []
    for _ in range(k * BATCH):
        args += [op, "u1", rng.randrange(bits), *value]
    return command(name, f"{prefix}:{key}", *args), k * BATCH


ROLES = (
    "BF.MEXISTS",
    "BF.MADD",
    "std_contains",
    "std_add",
    "blk_contains",
    "blk_add",
    "blk_add_compact",
)
_KEYS = ("bf", "std", "blk", "blk-compact")


def prepare(client, geo: Geometry, n: int, p: float) -> str:
    """Create the floor's keys (full size, as the filters are); returns their prefix."""
    prefix = f"floor-{uuid.uuid4().hex[:8]}"
    client.execute_command("BF.RESERVE", f"{prefix}:bf", p, n)
    client.setrange(f"{prefix}:std", geo.std_bits // 8, b"\0")
    client.setrange(f"{prefix}:blk", geo.blk_bits // 8, b"\0")
    client.setrange(f"{prefix}:blk-compact", geo.compact_bits // 8, b"\0")
    return prefix


def cleanup(client, prefix: str) -> None:
    client.delete(*(f"{prefix}:{key}" for key in _KEYS))


def open_socket(client) -> socket.socket:
    """A raw socket to the server (and database) ``client`` uses."""
    kwargs = client.connection_pool.connection_kwargs
    sock = socket.create_connection((kwargs["host"], kwargs["port"]))
    sock.sendall(command("SELECT", kwargs.get("db", 0)))
    if sock.recv(16) != b"+OK\r\n":
        sock.close()
        raise RuntimeError("SELECT failed on the floor's socket")
    return sock


def measure(client, geo: Geometry, rounds: int, n: int, p: float) -> dict[str, float]:
    """Median seconds per role, each role in turn, round after round."""
    prefix = prepare(client, geo, n, p)
    rng = random.Random(7)
    times: dict[str, list[float]] = {}
    try:
        with open_socket(client) as sock:
            for _ in range(rounds):
                for role in ROLES:
                    payload, elements = build(role, rng, geo, prefix)
                    times.setdefault(role, []).append(round_trip(sock, payload, elements))
                items = [f"floor-py-{rng.random()}" for _ in range(BATCH)]
                for name in ("BF.MEXISTS", "BF.MADD"):
                    start = time.perf_counter()
                    client.execute_command(name, f"{prefix}:bf", *items)
                    times.setdefault(f"{name} via redis-py", []).append(time.perf_counter() - start)
    finally:
        cleanup(client, prefix)
    return {role: statistics.median(values) for role, values in times.items()}


def ceiling(medians: dict[str, float], role: str, anchor: str) -> float:
    return medians[f"{anchor} via redis-py"] / medians[role]


def table(medians: dict[str, float], geo: Geometry) -> str:
    labels = geo.labels()
    head = f"{'command (1,000 items)':<62}{'median ms':>10}{'ceiling':>22}"
    lines = [head, "-" * len(head)]
    for role, seconds in medians.items():
        if role.startswith("BF."):
            shown, name = "—", role
        else:
            anchor = "BF.MADD" if "add" in role else "BF.MEXISTS"
            shown, name = f"{ceiling(medians, role, anchor):.2f}x of {anchor}", labels[role]
        lines.append(f"{name:<62}{seconds * 1e3:>10.3f}{shown:>22}")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.floor", description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=1_000_000)
    ap.add_argument("--p", type=float, default=0.01)
    ap.add_argument("--rounds", type=int, default=20)
    args = ap.parse_args(argv)
    module = module_path()
    if module is None:
        print("RedisBloom not found: pip install -e '.[bench]'", file=sys.stderr)
        return 2
    import redis

    geo = Geometry.of(args.n, args.p)
    with AnchorServer(module) as url:
        medians = measure(redis.Redis.from_url(url), geo, args.rounds, args.n, args.p)
    print(f"n={args.n:,} p={args.p}")
    print(table(medians, geo))
    return 0


if __name__ == "__main__":
    sys.exit(main())
