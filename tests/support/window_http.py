"""Raw HTTP/1.1 on 127.0.0.1 for the token-limited model servers (window_models.py): JSON
answers, server-sent events over chunked transfer encoding, keep-alive, and hanging until the
client goes away. A bug in a server's handler answers 500 with the traceback's last line and
is kept in `bugs`, so a test sees it instead of a dropped connection."""

from __future__ import annotations

import abc
import asyncio
import contextlib
import json
import traceback
from typing import Any, ClassVar

from .fakeserver import REASONS, read_request


def sse(data: Any, event: str | None = None) -> bytes:
    head = f"event: {event}\n" if event else ""
    payload = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False)
    return f"{head}data: {payload}\n\n".encode()


class HttpServer(abc.ABC):
    """Raw HTTP/1.1 with keep-alive on 127.0.0.1: JSON answers, SSE over chunked transfer
    encoding, and hanging until the client goes away. Subclasses implement `serve`."""

    name: ClassVar[str] = "window"

    def __init__(self) -> None:
        self.port = 0
        self._server: asyncio.Server | None = None
        self._handlers: set[asyncio.Task[None]] = set()
        self.bugs: list[str] = []
        """Tracebacks of requests the handler failed on (each answered 500)."""

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def start(self) -> HttpServer:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def close(self) -> None:
        if self._server is None:
            return
        self._server.close()
        for t in list(self._handlers):
            t.cancel()
        for t in list(self._handlers):
            with contextlib.suppress(BaseException):
                await t
        await self._server.wait_closed()

    @abc.abstractmethod
    async def serve(self, method: str, path: str, body: Any, reader: asyncio.StreamReader,
                    writer: asyncio.StreamWriter) -> bool:
        """Answer one request; returns whether the connection stays usable."""
        ...

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._handlers.add(task)
        try:
            while (request := await read_request(reader)) is not None:
                try:
                    usable = await self.serve(request.method, request.path, request.body,
                                              reader, writer)
                except (ConnectionError, asyncio.IncompleteReadError, asyncio.CancelledError):
                    raise
                except Exception as exc:
                    self.bugs.append(traceback.format_exc())
                    await self.send_json(writer, 500, {"error": {
                        "message": f"window server bug: {exc!r}", "type": "server_error"}})
                    usable = True
                if not usable:
                    return
        except (ConnectionError, asyncio.IncompleteReadError):
            return
        except asyncio.CancelledError:
            return  # the server is closing
        finally:
            self._handlers.discard(task)
            writer.close()
            # The task must end normally even when close() cancels it here: asyncio (3.11)
            # logs a handler task that ends cancelled as an error.
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await writer.wait_closed()

    @staticmethod
    async def send_json(writer: asyncio.StreamWriter, status: int, body: Any) -> None:
        data = json.dumps(body).encode()
        writer.write(
            f"HTTP/1.1 {status} {REASONS.get(status, 'Status')}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n\r\n".encode()
            + data)
        await writer.drain()

    @staticmethod
    async def send_stream(writer: asyncio.StreamWriter, events: list[bytes],
                          delay: float = 0.0) -> None:
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                     b"Cache-Control: no-cache\r\nTransfer-Encoding: chunked\r\n\r\n")
        for event in events:
            if delay:
                await asyncio.sleep(delay)
            writer.write(f"{len(event):x}\r\n".encode() + event + b"\r\n")
            await writer.drain()
        writer.write(b"0\r\n\r\n")
        await writer.drain()

    @staticmethod
    async def hang(reader: asyncio.StreamReader) -> None:
        """Answer nothing until the client closes the connection (or the server closes)."""
        with contextlib.suppress(ConnectionError):
            while await reader.read(4096):
                pass
