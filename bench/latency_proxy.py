"""A TCP proxy that delays every client->server chunk: a Redis that is ``DELAY_MS`` away.

    python -m bench.latency_proxy LISTEN_PORT TARGET_PORT DELAY_MS

127.0.0.1 only, for benchmarks (bench/asgi_middleware.py ``--redis-rtt-ms``): a
managed Redis is typically 0.3-1 ms away, the local one ~0.05 ms, and a path
that waits for Redis on one shared thread queues by that round trip.
Chunks keep their order per connection; replies pass without delay.
"""

from __future__ import annotations

import asyncio
import sys


async def pipe(reader, writer, delay: float) -> None:
    try:
        while chunk := await reader.read(65536):
            if delay:
                await asyncio.sleep(delay)
            writer.write(chunk)
            await writer.drain()
    except (ConnectionError, asyncio.CancelledError):
        pass
    finally:
        writer.close()


async def main(listen: int, target: int, delay: float) -> None:
    async def handle(client_reader, client_writer) -> None:
        try:
            server_reader, server_writer = await asyncio.open_connection("127.0.0.1", target)
        except OSError:
            client_writer.close()
            return
        await asyncio.gather(
            pipe(client_reader, server_writer, delay), pipe(server_reader, client_writer, 0)
        )

    server = await asyncio.start_server(handle, "127.0.0.1", listen, backlog=4096)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    port, target, delay_ms = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
    asyncio.run(main(port, target, delay_ms / 1000))
