"""One client session to one MCP server, shared by every run of a worker.

A supervisor task owns the transport and the SDK's `ClientSession` (their task groups must be
entered and left by the same task), connects, lists the tools, then waits until the worker
closes it or the server goes away, and connects again with backoff. stdio servers are started
through `launch.py`, so they die with the worker.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import tempfile
from collections.abc import AsyncIterator, Awaitable
from typing import IO, Any, TextIO, cast

import anyio
import httpx
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp import ClientSession, McpError, types
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.message import SessionMessage
from mcp.shared.session import ProgressFnT

from .. import tracing
from .config import HttpServer, McpServer, StdioServer
from .launch import launch_parameters

__all__ = ["IDEMPOTENCY_META_KEY", "ServerConnection", "ServerUnavailable"]

log = logging.getLogger("outlive.mcp")

IDEMPOTENCY_META_KEY = "idempotency_key"
"""The `_meta` field of every `tools/call` that carries `session_id:call_id`."""

BACKOFF_FIRST = 0.5
BACKOFF_MAX = 30.0
PING_INTERVAL = 2.0
PING_TIMEOUT = 2.0
"""An HTTP server is pinged this often: its transport does not report a server that went
away mid-response, so the calls in flight would wait for their timeouts."""
STDERR_TAIL_LINES = 12


class ServerUnavailable(Exception):
    """The server cannot take calls now; the message names it and says why."""


class ServerConnection:
    """Connect, keep connected, call tools. `tools` is the last list the server gave."""

    def __init__(self, server: McpServer) -> None:
        self.server = server
        self.tools: list[types.Tool] = []
        self.failure: str | None = None
        """Why the last attempt to connect failed, with the server's stderr tail."""
        self.ever_ready = False
        self.connects = 0
        self._session: ClientSession | None = None
        self._ready = asyncio.Event()
        self._attempted = asyncio.Event()
        self._closing = asyncio.Event()
        self._died = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._side: set[asyncio.Task[Any]] = set()
        self._stderr: IO[str] | None = None
        self._was_up = False

    @property
    def name(self) -> str:
        return self.server.name

    @property
    def ready(self) -> bool:
        return self._session is not None

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._supervise(), name=f"mcp:{self.name}")

    async def wait_started(self) -> None:
        """Until the first attempt to connect succeeded or failed."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(self.server.start_timeout + 5):
                await self._attempted.wait()

    async def close(self) -> None:
        """Disconnect; a stdio server is asked to exit, then terminated, then killed."""
        if self._side:  # let cancellations of aborted calls reach the server first
            await asyncio.wait(list(self._side), timeout=1)
        self._closing.set()
        if self._task is not None:
            with contextlib.suppress(TimeoutError, asyncio.CancelledError):
                async with asyncio.timeout(8):
                    await asyncio.shield(self._task)
            if not self._task.done():
                self._task.cancel()
                with contextlib.suppress(BaseException):
                    await self._task
        for t in list(self._side):
            t.cancel()
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None

    async def _supervise(self) -> None:
        delay = BACKOFF_FIRST
        while not self._closing.is_set():
            try:
                await self._connect_once()
            except Exception as exc:
                self.failure = self._describe(exc)
                log.warning("%s", self.failure)
            finally:
                self._session = None
                self._ready.clear()
                self._attempted.set()
            if self._closing.is_set():
                return
            if self._was_up:
                delay = BACKOFF_FIRST
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(delay):
                    await self._closing.wait()
            delay = min(delay * 2, BACKOFF_MAX)

    async def _connect_once(self) -> None:
        self._was_up = False
        self._died = asyncio.Event()
        self.connects += 1
        async with contextlib.AsyncExitStack() as stack:
            read, write = await stack.enter_async_context(self._transport())
            tapped = await stack.enter_async_context(self._tap(read))
            session = await stack.enter_async_context(ClientSession(
                tapped, write, message_handler=self._on_message,
                client_info=types.Implementation(name="outlive", version="0.1.0"),
            ))
            with anyio.fail_after(self.server.start_timeout):
                await session.initialize()
                self.tools = await _list_tools(session)
            self._session = session
            self._was_up = True
            self.ever_ready = True
            self.failure = None
            self._ready.set()
            self._attempted.set()
            log.info("MCP server %s connected: %d tools", self.name, len(self.tools))
            waits: list[asyncio.Future[Any]] = [asyncio.ensure_future(self._closing.wait()),
                     asyncio.ensure_future(self._died.wait())]
            if isinstance(self.server, HttpServer):
                waits.append(asyncio.ensure_future(self._watch(session, self._died)))
            try:
                await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for w in waits:
                    w.cancel()
            self._session = None
            self._ready.clear()
            if not self._closing.is_set():
                raise ServerUnavailable("the connection was lost")

    async def _watch(self, session: ClientSession, died: asyncio.Event) -> None:
        """Ping until the server stops answering, then say so."""
        while True:
            await asyncio.sleep(PING_INTERVAL)
            try:
                async with asyncio.timeout(PING_TIMEOUT):
                    await session.send_ping()
            except Exception as exc:
                log.info("MCP server %s does not answer a ping: %r", self.name, exc)
                died.set()
                return

    @contextlib.asynccontextmanager
    async def _transport(self) -> AsyncIterator[tuple[
            MemoryObjectReceiveStream[SessionMessage | Exception],
            MemoryObjectSendStream[SessionMessage]]]:
        server = self.server
        if isinstance(server, StdioServer):
            if self._stderr is None:
                self._stderr = tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace")
            errlog = cast(TextIO, self._stderr)
            async with stdio_client(launch_parameters(server), errlog=errlog) as (read, write):
                yield read, write
            return
        assert isinstance(server, HttpServer)
        headers = server.request_headers()
        hooks = {"request": [_traceparent_header]} if tracing.on() else {}
        async with (
            httpx.AsyncClient(headers=headers, follow_redirects=True, event_hooks=hooks,
                              timeout=httpx.Timeout(30.0, read=300.0)) as client,
            streamable_http_client(server.url, http_client=client) as (read, write, _),
        ):
            yield read, write

    @contextlib.asynccontextmanager
    async def _tap(self, read: MemoryObjectReceiveStream[SessionMessage | Exception]
                   ) -> AsyncIterator[MemoryObjectReceiveStream[SessionMessage | Exception]]:
        """Pass messages through, and notice when the server's side ends (it exited)."""
        send, recv = anyio.create_memory_object_stream[SessionMessage | Exception](0)
        died = self._died

        async def forward() -> None:
            try:
                async with read, send:
                    async for message in read:
                        await send.send(message)
            except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                pass
            finally:
                died.set()

        task = asyncio.create_task(forward(), name=f"mcp-tap:{self.name}")
        try:
            yield recv
        finally:
            task.cancel()
            with contextlib.suppress(BaseException):
                await task
            await read.aclose()
            await recv.aclose()

    async def _on_message(self, message: Any) -> None:
        if isinstance(message, types.ServerNotification) and isinstance(
            message.root, types.ToolListChangedNotification
        ):
            self._spawn(self._refresh_tools())
        elif isinstance(message, Exception):
            log.info("MCP server %s: %s", self.name, message)

    async def _refresh_tools(self) -> None:
        session = self._session
        if session is None:
            return
        try:
            self.tools = await _list_tools(session)
            log.info("MCP server %s changed its tools: %d now", self.name, len(self.tools))
        except Exception as exc:
            log.warning("MCP server %s: listing tools failed: %s", self.name, exc)

    def _spawn(self, coro: Awaitable[Any]) -> None:
        task = asyncio.ensure_future(coro)
        self._side.add(task)
        task.add_done_callback(self._side.discard)

    # -- calls -------------------------------------------------------------------------------

    async def call(self, tool: str, arguments: dict[str, Any], *, key: str,
                   progress: ProgressFnT) -> types.CallToolResult:
        """Call `tool`; a cancel of the calling task tells the server at once and returns.
        Raises `ServerUnavailable` when the server is down or goes away mid-call."""
        session = await self._wait_ready()
        died = self._died
        sent: list[int] = []
        meta: dict[str, Any] = {IDEMPOTENCY_META_KEY: key}
        tracing.inject(meta)  # the tool's span, in `_meta` (and a header over HTTP); when on

        async def send() -> types.CallToolResult:
            # The SDK numbers requests itself and has no cancel of its own: the id it is
            # about to use (taken without yielding) is the one `notifications/cancelled`
            # must name.
            sent.append(session._request_id)
            return await session.call_tool(tool, arguments, progress_callback=progress,
                                           meta=meta)

        request = asyncio.create_task(send(), name=f"mcp-call:{self.name}:{tool}")
        gone = asyncio.create_task(died.wait())
        try:
            await asyncio.wait((request, gone), return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            if sent:
                self._notify_cancelled(session, sent[0])
            raise
        finally:
            gone.cancel()
            if not request.done():
                request.cancel()
                self._spawn(_settle(request))
        if not request.done():
            raise ServerUnavailable(self._describe(ServerUnavailable("the connection was lost")))
        try:
            return request.result()
        except McpError as exc:
            if exc.error.code == types.CONNECTION_CLOSED:
                died.set()
                raise ServerUnavailable(self._describe(exc)) from None
            raise
        except (httpx.HTTPError, anyio.ClosedResourceError, anyio.BrokenResourceError) as exc:
            died.set()
            raise ServerUnavailable(self._describe(exc)) from None

    async def _wait_ready(self) -> ClientSession:
        session = self._session
        if session is not None:
            return session
        if not self.ever_ready and self.failure is not None:
            raise ServerUnavailable(self.failure)
        await self._ready.wait()  # the tool's timeout bounds this
        assert self._session is not None
        return self._session

    def _notify_cancelled(self, session: ClientSession, request_id: int) -> None:
        note = types.ClientNotification(types.CancelledNotification(
            params=types.CancelledNotificationParams(requestId=request_id,
                                                     reason="cancelled by the client")))

        async def send() -> None:
            with contextlib.suppress(Exception):
                async with asyncio.timeout(5):
                    await session.send_notification(note)

        self._spawn(send())

    # -- diagnostics -------------------------------------------------------------------------

    def stderr_tail(self) -> str:
        if self._stderr is None:
            return ""
        with contextlib.suppress(OSError, ValueError):
            self._stderr.flush()
            size = self._stderr.seek(0, os.SEEK_END)
            self._stderr.seek(max(0, size - 4096))
            lines = self._stderr.read().splitlines()
            return "\n".join(lines[-STDERR_TAIL_LINES:])
        return ""

    def _describe(self, exc: BaseException) -> str:
        what = "did not start" if not self.ever_ready else "went away"
        while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
            exc = exc.exceptions[0]  # the SDK's task groups wrap the real cause
        reason = str(exc) or type(exc).__name__
        if isinstance(exc, OSError | httpx.HTTPError):
            reason = f"{type(exc).__name__}: {reason}"
        if isinstance(exc, TimeoutError):
            reason = f"no answer within {self.server.start_timeout:g}s"
        text = f"MCP server {self.name!r} {what}: {reason}"
        tail = self.stderr_tail()
        return f"{text}; its stderr ends with:\n{tail}" if tail else text


async def _settle(task: asyncio.Task[Any]) -> None:
    """Wait out an abandoned request task and swallow its outcome."""
    with contextlib.suppress(BaseException):
        await task


async def _list_tools(session: ClientSession) -> list[types.Tool]:
    tools: list[types.Tool] = []
    cursor: str | None = None
    while True:
        params = types.PaginatedRequestParams(cursor=cursor) if cursor else None
        page = await session.list_tools(params=params)
        tools.extend(page.tools)
        cursor = page.nextCursor
        if not cursor:
            return tools


async def _traceparent_header(request: httpx.Request) -> None:
    """A `tools/call` carries its span's `traceparent` in `_meta`; over HTTP it goes in a
    header too. The SDK sends requests from its own task, outside the calling tool's span,
    so the header is read back from the request rather than from the current context."""
    try:
        body = request.content
    except httpx.RequestNotRead:  # a streamed body: not a JSON-RPC message of ours
        return
    if request.method != "POST" or b'"traceparent"' not in body:
        return
    try:
        message = json.loads(body)
    except ValueError:
        return
    params = message.get("params") if isinstance(message, dict) else None
    meta = params.get("_meta") if isinstance(params, dict) else None
    traceparent = meta.get("traceparent") if isinstance(meta, dict) else None
    if isinstance(traceparent, str):
        request.headers["traceparent"] = traceparent
