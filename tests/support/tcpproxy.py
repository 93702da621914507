"""A real TCP proxy for network-trouble tests, in the test's event loop (on 127.0.0.1 unless
`listen_host` says otherwise: the multi-host test bed, tests/support/hosts.py, puts one on the
root side of each namespace's veth link).

It forwards bytes both ways between its clients and one upstream port, and can misbehave the
two ways networks do:

* `black_hole()`: every connection stays open but nothing gets through, in either direction,
  and new connections are accepted and then hang (a laptop asleep, a proxy that lost its
  route). Nothing is closed, so only a watchdog can notice.
* `drop()`: every open connection is reset and new ones are closed at once (a partition that
  the client sees as errors).
* `cut()`: every open connection is reset once; new ones work at once (a blip).

`heal()` forwards again; black-holed bytes then flow on (as after a wake-up).

`retarget(port, host)` sends new connections to another upstream and resets the open ones,
as a load balancer does when its health check takes a backend out: the proxy then stands for
the front door of several API hosts (tests/chaos/test_web_failover.py).

`delay_up` / `delay_down` (seconds, settable at any time) hold each chunk that long before
it is forwarded towards the upstream / back to the client: added latency per direction, in
order, for kernels without `netem`. A round trip through the proxy takes both.

`answers` counts the round trips a client waited for: how often bytes came back from
upstream after the client last sent some (meaningful with one connection through the proxy).
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import socket
import struct

__all__ = ["TcpProxy"]

_CHUNK = 65536


class Mode(enum.Enum):
    FORWARD = "forward"
    BLACK_HOLE = "black_hole"
    DROP = "drop"


class TcpProxy:
    def __init__(self, upstream_port: int, upstream_host: str = "127.0.0.1", *,
                 listen_host: str = "127.0.0.1", delay_up: float = 0.0,
                 delay_down: float = 0.0) -> None:
        self.upstream = (upstream_host, upstream_port)
        self.listen_host = listen_host
        self.delay_up = delay_up
        self.delay_down = delay_down
        self.mode = Mode.FORWARD
        self._flowing = asyncio.Event()
        self._flowing.set()
        self._server: asyncio.Server | None = None
        self._conns: set[tuple[asyncio.StreamWriter, asyncio.StreamWriter | None]] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self.accepted = 0
        """Connections accepted so far: a client's reconnects show here."""
        self.cuts = 0
        self.answers = 0
        """Upstream replies that followed bytes from a client: its round trips."""
        self._sent_last = False

    @property
    def port(self) -> int:
        assert self._server is not None
        port: int = self._server.sockets[0].getsockname()[1]
        return port

    @property
    def url(self) -> str:
        return f"http://{self.listen_host}:{self.port}"

    async def start(self) -> TcpProxy:
        self._server = await asyncio.start_server(self._accept, self.listen_host, 0)
        return self

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        self._reset_all()
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(BaseException):
                await task
        if self._server is not None:
            with contextlib.suppress(Exception):
                await self._server.wait_closed()

    def black_hole(self) -> None:
        self.mode = Mode.BLACK_HOLE
        self._flowing.clear()

    def upstream_ports(self) -> list[int]:
        """The local ports of the open upstream connections: how the server (its
        `pg_stat_activity.client_port`) tells this proxy's clients from everyone else's."""
        out = []
        for _, up in list(self._conns):
            name = up.get_extra_info("sockname") if up is not None else None
            if name:
                out.append(int(name[1]))
        return out

    def stall(self) -> None:
        """`black_hole()` under the name the test bed uses: forwarding stops, sockets stay."""
        self.black_hole()

    def drop(self) -> None:
        self.mode = Mode.DROP
        self._flowing.clear()
        self._reset_all()

    def cut(self) -> None:
        self.cuts += 1
        self._reset_all()

    def heal(self) -> None:
        self.mode = Mode.FORWARD
        self._flowing.set()

    def retarget(self, upstream_port: int, upstream_host: str | None = None, *,
                 reset: bool = True) -> None:
        """Forward new connections to `upstream_host:upstream_port` (the host unchanged when
        None); with `reset`, the open ones (still joined to the old upstream) are reset, so a
        client's kept-alive connection cannot keep it on the old one."""
        self.upstream = (self.upstream[0] if upstream_host is None else upstream_host,
                         upstream_port)
        if reset:
            self.cut()

    # -- internals --------------------------------------------------------------------------

    def _reset_all(self) -> None:
        for client, upstream in list(self._conns):
            _reset(client)
            if upstream is not None:
                _reset(upstream)
        self._conns.clear()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        if self.mode is Mode.DROP:
            _reset(writer)
            return
        entry: tuple[asyncio.StreamWriter, asyncio.StreamWriter | None] = (writer, None)
        self._conns.add(entry)
        try:
            await self._flowing.wait()  # a black-holed connect hangs here, open
            if self.mode is Mode.DROP or entry not in self._conns:
                return
            up_reader, up_writer = await asyncio.open_connection(*self.upstream)
        except (OSError, asyncio.CancelledError):
            self._conns.discard(entry)
            _reset(writer)
            return
        self._conns.discard(entry)
        entry = (writer, up_writer)
        self._conns.add(entry)
        pumps = [self._spawn(self._pump(reader, up_writer, upstream=True)),
                 self._spawn(self._pump(up_reader, writer, upstream=False))]
        await asyncio.wait(pumps, return_when=asyncio.FIRST_COMPLETED)
        self._conns.discard(entry)
        for w in (writer, up_writer):
            with contextlib.suppress(Exception):
                w.close()

    def _spawn(self, coro: object) -> asyncio.Task[None]:
        task: asyncio.Task[None] = asyncio.get_running_loop().create_task(coro)  # type: ignore[arg-type]
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def _pump(self, src: asyncio.StreamReader, dst: asyncio.StreamWriter, *,
                    upstream: bool) -> None:
        delayed: asyncio.Queue[tuple[float, bytes]] | None = None
        sender: asyncio.Task[None] | None = None
        loop = asyncio.get_running_loop()
        try:
            with contextlib.suppress(OSError, asyncio.IncompleteReadError):
                while True:
                    await self._flowing.wait()
                    data = await src.read(_CHUNK)
                    if not data:
                        break
                    delay = self.delay_up if upstream else self.delay_down
                    if delay > 0 and delayed is None:  # from now on in order, through a queue
                        delayed = asyncio.Queue()
                        sender = self._spawn(self._send_later(delayed, dst, upstream=upstream))
                    if delayed is not None:
                        delayed.put_nowait((loop.time() + delay, data))
                        continue
                    if not await self._forward(data, dst, upstream=upstream):
                        return
            if delayed is not None and sender is not None:  # flush what is still held
                delayed.put_nowait((0.0, b""))
                await sender
        finally:
            if sender is not None and not sender.done():
                sender.cancel()

    async def _send_later(self, queue: asyncio.Queue[tuple[float, bytes]],
                          dst: asyncio.StreamWriter, *, upstream: bool) -> None:
        loop = asyncio.get_running_loop()
        with contextlib.suppress(OSError):
            while True:
                due, data = await queue.get()
                if not data:
                    return
                if (wait := due - loop.time()) > 0:
                    await asyncio.sleep(wait)
                if not await self._forward(data, dst, upstream=upstream):
                    return

    async def _forward(self, data: bytes, dst: asyncio.StreamWriter, *, upstream: bool) -> bool:
        """Write one chunk on (False: the link was dropped meanwhile)."""
        await self._flowing.wait()  # bytes read during a black hole wait here
        if self.mode is Mode.DROP:
            return False
        if not upstream and self._sent_last:
            self.answers += 1
        self._sent_last = upstream
        dst.write(data)
        await dst.drain()
        return True


def _reset(writer: asyncio.StreamWriter) -> None:
    """Close with a TCP reset (SO_LINGER 0), as a dropped route looks to the other end."""
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    with contextlib.suppress(Exception):
        writer.close()
