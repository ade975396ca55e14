"""Same-run A/B of the asyncio transport (engine/transport/aio.py) against redis.asyncio.

    python -m bench.aio_transport [--n 3000] [--batches 20] [--size 1000] [--tasks 50]
                                  [--rounds 7]

One event loop, one Redis (``BENCH_REDIS_URL``, default 127.0.0.1:6379), one filter
(standard layout, 1,000 items added). Each workload is sent three (or four) ways,
alternated round by round (order reversed every other round), after one untimed
warm-up round:

- ``engine``: the async handle (``aget_filter``; ``acontains`` / ``aadd`` /
  ``acontains_many`` / ``aadd_many``): the layout's plan (engine/plans.py, the RESP
  bytes of packing.py) on aio.py's kept per-loop connections, its breaker, its slots;
- ``packed+pool``: the same plan (same bytes, same ``finish``) on a connection borrowed
  from a ``redis.asyncio.ConnectionPool`` per call (``send_packed_command`` /
  ``read_response`` / ``release``): redis.asyncio's pool, our packing;
- ``redis.asyncio``: ``Redis(connection_pool=ConnectionPool(...))``: ``execute_command``
  for one item, ``pipeline(transaction=False)`` for a batch, with the arguments of the
  engine's commands (``BITFIELD_RO key GET u32 <trailer> GET u1 <pos>...`` /
  ``BITFIELD key GET u40 <trailer> SET u1 <pos> 1 ... SET u24 <stamp> OVERFLOW WRAP
  INCRBY i64 ...``;
  batches in the engine's chunks, ``packing.item_chunks``): redis-py packs and
  parses. Positions come from the engine's own hashing (``Filter._digest_one`` /
  ``_digest_many``); before timing, the RESP encoding of these arguments is checked
  byte for byte against the engine's plan, and every way's answers against the
  engine's;
- ``redis.asyncio/item`` (batches only): one command per item in the pipeline (what a
  plain redis-py port would send; more work for Redis too).

The pools get the engine's timeouts (``SOCKET_TIMEOUT`` / ``CONNECT_TIMEOUT``). The
concurrent workload runs ``--tasks`` coroutines at once, each doing single
``contains`` (``n`` calls in all); there, ``redis.asyncio/16`` is a
``BlockingConnectionPool(max_connections=16)``, the cap aio.py applies per loop
(``MAX_CONNECTIONS_PER_LOOP``).

Prints, per way, the median wall µs per call (batches: per batch, and items/s), its
best and worst round, its ratio to ``engine`` (of the medians, and the median of the
per-round ratios), and the median CPU time of this process per call (the client's
own work: steadier than wall time on a shared machine) with its ratio to
``engine``: the figure that decides whether aio.py's own connections stay
(docs/architecture.md).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any


def setup() -> None:
    """bench/settings.py with a key prefix of this run's own (``BENCH_REDIS_URL``)."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bench.settings")
    os.environ.setdefault("BENCH_PREFIX", f"bench-aio-{uuid.uuid4().hex[:8]}")
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


def test_args(segment: Any, flat: Any) -> list[Any]:
    """``packing.pack_test``'s command (``test_head`` + ``GET u1`` per position) as
    redis-py arguments."""
    ops = [part for p in flat for part in ("GET", "u1", p)]
    return ["BITFIELD_RO", segment.keys.bits, "GET", "u32", segment.trailer_offset * 8, *ops]


def set_args(segment: Any, flat: Any, stamp: int | None = None) -> list[Any]:
    """``packing.pack_set``'s command (``set_head``, ``SET u1 p 1`` per position,
    ``stamped_tail``: a new stamp unless ``stamp`` is given) as redis-py arguments."""
    from django_bloom.engine.format import new_stamp

    t_bit = segment.trailer_offset * 8
    ops = [part for p in flat for part in ("SET", "u1", p, 1)]
    stamp = new_stamp() if stamp is None else stamp
    tail = ["SET", "u24", t_bit + 40, stamp, "OVERFLOW", "WRAP", "INCRBY", "i64", t_bit + 64, 1]
    return ["BITFIELD", segment.keys.bits, "GET", "u40", t_bit, *ops, *tail]


def check_same_commands(f: Any) -> None:
    """The redis-py arguments encode to the engine's plan bytes (item order: list input)."""
    import functools

    from django_bloom.engine import plans
    from django_bloom.engine.transport import packing
    from django_bloom.engine.transport.packing import header, item_chunks

    segment = f.layout.segment
    one = f._digest_one("x")[1]
    many = f._digest_many([f"b{i}" for i in range(3000)], f._bound)[1]  # 3 BITFIELD commands
    stamped = functools.partial(set_args, stamp=1234567)
    drawn, packing.new_stamp = packing.new_stamp, lambda: 1234567  # the same stamp, once
    try:
        for flat in (list(one), list(map(int, many))):
            for make_args, make_plan in ((test_args, plans.test_plan), (stamped, plans.set_plan)):
                mine = b"".join(
                    header(len(args), *map(str, args))
                    for args in (
                        make_args(segment, c) for c in item_chunks(flat, segment.num_hashes)
                    )
                )
                assert mine == make_plan(segment, flat).payload, make_args
    finally:
        packing.new_stamp = drawn


async def bench(args: argparse.Namespace) -> None:
    import redis.asyncio as aioredis

    import django_bloom
    from django_bloom.conf import get_config
    from django_bloom.engine.transport.packing import item_chunks, per_item

    f = await django_bloom.aget_filter("aio-transport")
    segment = f.layout.segment
    k, fingerprint = segment.num_hashes, segment.fingerprint
    config = get_config()
    url = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/0")
    timeouts = {
        "socket_timeout": config["SOCKET_TIMEOUT"],
        "socket_connect_timeout": config["CONNECT_TIMEOUT"],
    }
    pool = aioredis.ConnectionPool.from_url(url, **timeouts)
    client = aioredis.Redis(connection_pool=pool)
    blocking = aioredis.BlockingConnectionPool.from_url(url, max_connections=16, **timeouts)
    capped = aioredis.Redis(connection_pool=blocking)

    singles = [f"item-{i % 2000}" for i in range(args.n)]  # half of them added
    batches = [
        [f"item-{(b * args.size + i) % 2000}" for i in range(args.size)]
        for b in range(args.batches)
    ]

    async def packed(plan: Any) -> Any:
        """The engine's plan on a connection borrowed from redis.asyncio's pool."""
        try:
            conn = await pool.get_connection()
        except TypeError:  # redis-py < 5.3 requires a command name (5.3+ warns on one)
            conn = await pool.get_connection("BITFIELD")
        try:
            await conn.send_packed_command(plan.payload)
            replies = [await conn.read_response() for _ in range(plan.replies)]
        except BaseException:
            await conn.disconnect()
            raise
        finally:
            await pool.release(conn)
        return plan.finish(replies)

    def check(head: int) -> None:
        if head != fingerprint:
            raise AssertionError("trailer does not match")

    # -- single contains --------------------------------------------------------------
    async def engine_contains(item: str) -> bool:
        return await f.acontains(item)

    async def packed_contains(item: str) -> bool:
        return (await packed(f.layout.contains_plan(f._digest_one(item)[1])))[0]

    async def redis_contains(item: str, redis: Any = client) -> bool:
        reply = await redis.execute_command(*test_args(segment, f._digest_one(item)[1]))
        check(reply[0])
        return 0 not in reply[1:]

    async def capped_contains(item: str) -> bool:
        return await redis_contains(item, capped)

    # -- single add ---------------------------------------------------------------------
    async def engine_add(item: str) -> bool:
        return await f.aadd(item)

    async def packed_add(item: str) -> bool:
        return (await packed(f.layout.add_plan(f._digest_one(item)[1]))).was_new[0]

    async def redis_add(item: str) -> bool:
        reply = await client.execute_command(*set_args(segment, f._digest_one(item)[1]))
        check(reply[0] >> 8)
        return 0 in reply[1:-2]

    # -- batches ------------------------------------------------------------------------
    def flat_of(batch: list[str]) -> Any:
        return f._digest_many(batch, f._bound)[1]

    def flat_list(batch: list[str]) -> list[int]:
        flat = flat_of(batch)
        return flat.tolist() if hasattr(flat, "tolist") else list(flat)

    async def pipelined(commands: list[list[Any]], tail: int, want_all: bool) -> list[bool]:
        pipe = client.pipeline(transaction=False)
        for command in commands:
            pipe.execute_command(*command)
        out: list[bool] = []
        for reply in await pipe.execute():
            check(reply[0] if want_all else reply[0] >> 8)
            out += per_item(bytes(reply[1 : len(reply) - tail]), None, k, want_all)
        return out

    def chunked(make: Callable[[Any, Any], list[Any]], batch: list[str]) -> list[list[Any]]:
        return [make(segment, c) for c in item_chunks(flat_list(batch), k)]

    def per_item_commands(make: Callable[[Any, Any], list[Any]], batch: list[str]) -> list:
        flat = flat_list(batch)
        return [make(segment, flat[i : i + k]) for i in range(0, len(flat), k)]

    async def engine_contains_many(batch: list[str]) -> list[bool]:
        return await f.acontains_many(batch)

    async def packed_contains_many(batch: list[str]) -> list[bool]:
        return await packed(f.layout.contains_plan(flat_of(batch)))

    async def redis_contains_many(batch: list[str]) -> list[bool]:
        return await pipelined(chunked(test_args, batch), 0, True)

    async def redis_contains_each(batch: list[str]) -> list[bool]:
        return await pipelined(per_item_commands(test_args, batch), 0, True)

    async def engine_add_many(batch: list[str]) -> list[bool]:
        return await f.aadd_many(batch)

    async def packed_add_many(batch: list[str]) -> list[bool]:
        return (await packed(f.layout.add_plan(flat_of(batch)))).was_new

    async def redis_add_many(batch: list[str]) -> list[bool]:
        return await pipelined(chunked(set_args, batch), 2, False)

    async def redis_add_each(batch: list[str]) -> list[bool]:
        return await pipelined(per_item_commands(set_args, batch), 2, False)

    # -- workloads: (name, {way: one call}, inputs, concurrent tasks) -------------------
    Way = Callable[[Any], Awaitable[Any]]
    workloads: list[tuple[str, dict[str, Way], list[Any], int]] = [
        (
            "single contains",
            {
                "engine": engine_contains,
                "packed+pool": packed_contains,
                "redis.asyncio": redis_contains,
            },
            singles,
            1,
        ),
        (
            "single add",
            {"engine": engine_add, "packed+pool": packed_add, "redis.asyncio": redis_add},
            singles,
            1,
        ),
        (
            f"contains_many of {args.size}",
            {
                "engine": engine_contains_many,
                "packed+pool": packed_contains_many,
                "redis.asyncio": redis_contains_many,
                "redis.asyncio/item": redis_contains_each,
            },
            batches,
            1,
        ),
        (
            f"add_many of {args.size}",
            {
                "engine": engine_add_many,
                "packed+pool": packed_add_many,
                "redis.asyncio": redis_add_many,
                "redis.asyncio/item": redis_add_each,
            },
            batches,
            1,
        ),
        (
            f"single contains, {args.tasks} concurrent tasks",
            {
                "engine": engine_contains,
                "packed+pool": packed_contains,
                "redis.asyncio": redis_contains,
                "redis.asyncio/16": capped_contains,
            },
            singles,
            args.tasks,
        ),
    ]

    # Same answers every way (and a warm-up: connections, numpy tables, lru caches).
    # Writes: the items are added once first, so every way then answers "not new".
    for name, ways, inputs, _tasks in workloads:
        sample = inputs[:50]
        if "add" in name:
            for x in sample:
                await ways["engine"](x)
        answers = {}
        for way, call in ways.items():  # not one nested comprehension: Python 3.10 refuses it
            answers[way] = [await call(x) for x in sample]
        for way, got in answers.items():
            assert got == answers["engine"], f"{name}: {way} answers differently"

    async def timed(call: Way, inputs: list[Any], tasks: int) -> tuple[float, float]:
        """(wall, this process's CPU) µs per call."""

        async def worker(part: list[Any]) -> None:
            for x in part:
                await call(x)

        wall, cpu = time.perf_counter(), time.process_time()
        if tasks == 1:
            await worker(inputs)
        else:
            await asyncio.gather(*(worker(inputs[t::tasks]) for t in range(tasks)))
        scale = 1e6 / len(inputs)
        return (time.perf_counter() - wall) * scale, (time.process_time() - cpu) * scale

    walls = {name: {way: [] for way in ways} for name, ways, _i, _t in workloads}
    cpus = {name: {way: [] for way in ways} for name, ways, _i, _t in workloads}
    for round_ in range(args.rounds):
        for name, ways, inputs, tasks in workloads:
            order = list(ways) if round_ % 2 == 0 else list(reversed(ways))
            for way in order:
                wall, cpu = await timed(ways[way], inputs, tasks)
                walls[name][way].append(wall)
                cpus[name][way].append(cpu)

    print(
        f"asyncio transport, {args.rounds} alternating rounds, one loop "
        f"(n={args.n} single calls, {args.batches} batches of {args.size} per round)"
    )
    print("  way                  wall med [best-worst]   /engine  per-round  client CPU  /engine")
    for name, _ways, _inputs, _tasks in workloads:
        base = statistics.median(walls[name]["engine"])
        base_cpu = statistics.median(cpus[name]["engine"])
        batch = name.startswith(("contains_many", "add_many"))
        print(f"{name} (µs per {'batch' if batch else 'call'})")
        for way, values in walls[name].items():
            median, cpu = statistics.median(values), statistics.median(cpus[name][way])
            paired = statistics.median(
                w / e for w, e in zip(values, walls[name]["engine"], strict=True)
            )
            spread = f"[{min(values):.1f}-{max(values):.1f}]"
            rate = f"  {args.size / median * 1e6:8,.0f} items/s" if batch else ""
            print(
                f"  {way:19s} {median:8.1f} {spread:>19s} {median / base:5.2f}x"
                f"  {paired:5.2f}x  {cpu:9.1f}  {cpu / base_cpu:5.2f}x{rate}"
            )
    await pool.disconnect()
    await blocking.disconnect()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=3000, help="single calls per way and round")
    parser.add_argument("--batches", type=int, default=20, help="batches per way and round")
    parser.add_argument("--size", type=int, default=1000, help="items per batch")
    parser.add_argument("--tasks", type=int, default=50, help="concurrent tasks")
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    setup()
    import django_bloom

    f = django_bloom.create_filter("aio-transport", capacity=100_000, error_rate=0.01)
    f.add_many([f"item-{i}" for i in range(1000)])
    check_same_commands(f)
    # Keep the handle in the per-process cache (METADATA_TTL): the async ORM's worker
    # thread would open its own, empty, in-memory SQLite database.
    django_bloom.get_filter("aio-transport")
    try:
        asyncio.run(bench(args))
    finally:
        f.delete()


if __name__ == "__main__":
    main()
