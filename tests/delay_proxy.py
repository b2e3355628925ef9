"""A TCP proxy that delays every byte by a fixed time in each direction: an emulated round
trip of 2 x DELAY between a standby and its primary, for kernels without tc netem (this
one: no sch_netem). Latency only, no bandwidth limit or loss; order is kept.

    python tests/delay_proxy.py LISTEN_PORT TARGET_PORT ONE_WAY_MS

Prints "ready" once it listens. Runs in its own process so that it never waits for the
measuring process's interpreter lock."""

from __future__ import annotations

import asyncio
import sys
import time


async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
               delay: float) -> None:
    # Chunks go into a queue stamped with their arrival; a sender releases each at its time,
    # so a burst is delayed as a whole, not chunk after chunk.
    queue: asyncio.Queue = asyncio.Queue()

    async def send() -> None:
        while (item := await queue.get()) is not None:
            due, data = item
            if (wait := due - time.monotonic()) > 0:
                await asyncio.sleep(wait)
            writer.write(data)
            await writer.drain()
        writer.close()

    sender = asyncio.create_task(send())
    try:
        while data := await reader.read(65536):
            queue.put_nowait((time.monotonic() + delay, data))
    except ConnectionError:
        pass
    queue.put_nowait(None)
    await sender


async def main(listen: int, target: int, delay: float) -> None:
    async def handle(client_r, client_w) -> None:
        server_r, server_w = await asyncio.open_connection("127.0.0.1", target)
        await asyncio.gather(pipe(client_r, server_w, delay), pipe(server_r, client_w, delay),
                             return_exceptions=True)

    server = await asyncio.start_server(handle, "127.0.0.1", listen)
    print("ready", flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    listen_port, target_port, one_way_ms = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
    asyncio.run(main(listen_port, target_port, one_way_ms / 1000))
