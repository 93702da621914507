"""A fake model server on a real socket: raw HTTP/1.1 on 127.0.0.1 speaking recorded
streaming fixtures (SSE over chunked transfer encoding), so the real SDKs are tested end to
end — connection handling, keep-alive, chunked decoding, error bodies and disconnects included.

Each request takes the next scripted `Reply`. A reply can stream a fixture whole, cut the
socket in the middle of an event, or hang after some events and record when the client
closes the connection (how cancel-to-abort is measured).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

FIXTURES = Path(__file__).resolve().parents[1] / "providers" / "fixtures"
"""Recorded streams and error bodies, by vendor (tests/providers/fixtures)."""

REASONS = {200: "OK", 400: "Bad Request", 401: "Unauthorized", 404: "Not Found",
           429: "Too Many Requests", 500: "Internal Server Error", 529: "Overloaded"}


def fixture_text(name: str) -> str:
    return (FIXTURES / name).read_text()


def fixture_json(name: str) -> Any:
    return json.loads(fixture_text(name))


def sse_events(text: str) -> list[bytes]:
    """A fixture's events, each with its blank-line terminator, as sent on the wire."""
    return [(e.strip("\n") + "\n\n").encode() for e in text.split("\n\n") if e.strip()]


@dataclass
class Reply:
    status: int = 200
    fixture: str | None = None
    """An .sse fixture to stream (status 200) or a .json error body."""
    cut_after: int | None = None
    """Stream this many events, then half of the next one, then close the socket."""
    hang_after: int | None = None
    """Stream this many events, then keep the connection open until the client closes it."""
    delay: float = 0.0
    """Seconds between events."""
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class Request:
    method: str
    path: str
    headers: dict[str, str]
    body: Any


async def read_request(reader: asyncio.StreamReader) -> Request | None:
    """One HTTP/1.1 request with a JSON body (or none), or None once the client hung up."""
    line = await reader.readline()
    if not line:
        return None
    method, path, _ = line.decode().split(" ", 2)
    headers: dict[str, str] = {}
    while True:
        h = await reader.readline()
        if h in (b"\r\n", b"\n", b""):
            break
        k, _, v = h.decode().partition(":")
        headers[k.strip().lower()] = v.strip()
    length = int(headers.get("content-length", "0"))
    raw = await reader.readexactly(length) if length else b""
    body = json.loads(raw) if raw else None
    return Request(method, path, headers, body)


class FakeServer:
    def __init__(self, replies: list[Reply] | None = None) -> None:
        self.replies: list[Reply] = list(replies or [])
        self.requests: list[Request] = []
        self.hanging = asyncio.Event()
        self.hang_started: float | None = None
        self.disconnected = asyncio.Event()
        self.disconnected_at: float | None = None
        self._server: asyncio.Server | None = None
        self._handlers: set[asyncio.Task[None]] = set()
        self.port = 0

    def script(self, *replies: Reply) -> None:
        self.replies.extend(replies)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def start(self) -> FakeServer:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            for t in list(self._handlers):
                t.cancel()
            for t in list(self._handlers):
                with contextlib.suppress(BaseException):
                    await t
            await self._server.wait_closed()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._handlers.add(task)
        try:
            while True:
                request = await self._read_request(reader)
                if request is None:
                    return
                self.requests.append(request)
                if self.replies:
                    reply = self.replies.pop(0)
                else:
                    reply = Reply(500, None)
                if not await self._respond(reply, reader, writer):
                    return
        except (ConnectionError, asyncio.IncompleteReadError):
            return
        except asyncio.CancelledError:
            return  # the server is closing; end quietly (asyncio logs cancelled handlers)
        finally:
            self._handlers.discard(task)
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    @staticmethod
    async def _read_request(reader: asyncio.StreamReader) -> Request | None:
        return await read_request(reader)

    async def _respond(self, reply: Reply, reader: asyncio.StreamReader,
                       writer: asyncio.StreamWriter) -> bool:
        """Send one reply; returns whether the connection stays usable."""
        reason = REASONS.get(reply.status, "Status")
        extra = "".join(f"{k}: {v}\r\n" for k, v in reply.headers.items())
        if reply.fixture is None or reply.fixture.endswith(".json"):
            body = (fixture_text(reply.fixture) if reply.fixture else
                    json.dumps({"error": {"message": "no scripted reply", "type": "server_error"}}))
            data = body.encode()
            writer.write(
                f"HTTP/1.1 {reply.status} {reason}\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(data)}\r\n{extra}\r\n".encode() + data
            )
            await writer.drain()
            return True
        writer.write(
            f"HTTP/1.1 {reply.status} {reason}\r\nContent-Type: text/event-stream\r\n"
            f"Cache-Control: no-cache\r\nTransfer-Encoding: chunked\r\n{extra}\r\n".encode()
        )
        await writer.drain()
        for i, event in enumerate(sse_events(fixture_text(reply.fixture))):
            if reply.cut_after is not None and i == reply.cut_after:
                half = event[: max(1, len(event) // 2)]
                writer.write(f"{len(event):x}\r\n".encode() + half)  # a chunk cut short
                await writer.drain()
                writer.close()
                return False
            if reply.hang_after is not None and i == reply.hang_after:
                await self._hang(reader)
                return False
            if reply.delay:
                await asyncio.sleep(reply.delay)
            writer.write(f"{len(event):x}\r\n".encode() + event + b"\r\n")
            await writer.drain()
        if reply.hang_after is not None:
            await self._hang(reader)
            return False
        writer.write(b"0\r\n\r\n")
        await writer.drain()
        return True

    async def _hang(self, reader: asyncio.StreamReader) -> None:
        self.hang_started = time.monotonic()
        self.hanging.set()
        with contextlib.suppress(ConnectionError):
            while await reader.read(4096):
                pass
        self.disconnected_at = time.monotonic()
        self.disconnected.set()
