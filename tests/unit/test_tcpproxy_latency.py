"""The test bed's TCP proxy: it adds latency per direction (this kernel has no `netem`): each
chunk waits its direction's delay, in order, and a round trip takes both
(tests/support/tcpproxy.py; the multi-host test bed and its benches rely on it); and
`retarget` moves it to another upstream, as a front door moves off a failed API host."""

from __future__ import annotations

import asyncio
import time

from tests.support.tcpproxy import TcpProxy


async def _echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    while data := await reader.read(65536):
        writer.write(data)
        await writer.drain()
    writer.close()


async def test_each_direction_waits_its_delay_and_keeps_the_order() -> None:
    server = await asyncio.start_server(_echo, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    proxy = await TcpProxy(port, delay_up=0.05, delay_down=0.1).start()
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
        t0 = time.monotonic()
        writer.write(b"ping")
        await writer.drain()
        assert await reader.readexactly(4) == b"ping"
        rtt = time.monotonic() - t0
        assert 0.15 <= rtt < 0.6, rtt
        for i in range(20):  # back to back: delayed, never reordered
            writer.write(f"{i:03d}".encode())
        await writer.drain()
        got = await asyncio.wait_for(reader.readexactly(60), 5)
        assert got == b"".join(f"{i:03d}".encode() for i in range(20))
        proxy.delay_up = proxy.delay_down = 0.0  # stays in order when the delay goes away
        writer.write(b"end")
        assert await asyncio.wait_for(reader.readexactly(3), 5) == b"end"
        writer.close()
    finally:
        await proxy.close()
        server.close()
        await server.wait_closed()


async def _tagged(tag: bytes) -> asyncio.Server:
    """A server that answers every connection with `tag`, then echoes."""

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(tag)
        await writer.drain()
        await _echo(reader, writer)

    return await asyncio.start_server(serve, "127.0.0.1", 0)


async def test_retarget_moves_new_connections_and_resets_the_open_ones() -> None:
    one, two = await _tagged(b"one"), await _tagged(b"two")
    proxy = await TcpProxy(one.sockets[0].getsockname()[1]).start()
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
        assert await asyncio.wait_for(reader.readexactly(3), 5) == b"one"
        proxy.retarget(two.sockets[0].getsockname()[1])
        # The open connection was joined to the old upstream: it is reset, not kept on it.
        try:
            rest = await asyncio.wait_for(reader.read(100), 5)
        except ConnectionResetError:
            rest = b""
        assert rest == b""
        writer.close()
        reader, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
        assert await asyncio.wait_for(reader.readexactly(3), 5) == b"two"
        writer.write(b"abc")
        assert await asyncio.wait_for(reader.readexactly(3), 5) == b"abc"
        writer.close()
        proxy.retarget(one.sockets[0].getsockname()[1], "127.0.0.1", reset=False)
        assert proxy.upstream == ("127.0.0.1", one.sockets[0].getsockname()[1])
    finally:
        await proxy.close()
        for s in (one, two):
            s.close()
            await s.wait_closed()
