"""`AsyncClient`: every endpoint of docs/http-api.md with typed results, plus the resumable
session stream and one-connection owner streams.

    async with AsyncClient() as client:          # OUTLIVE_URL, OUTLIVE_API_KEY or ./outlive.db.key
        s = await client.create_session("hello")
        async for item in client.stream(s.id, until_end=True):
            ...

`stream()` reconnects on its own: with `Last-Event-ID` set to the last seq it handed out,
after a delay that starts at 100 ms and doubles to 5 s (with jitter; back to 100 ms after a
connection that worked). It drops events it already delivered, reconnects when one is
missing, and raises only what will not heal: 401, 404, 400…, or a frame that still does not
parse after 5 connections (a server bug); 5xx answers, network errors, dropped connections
and server restarts are waited out.

Given `base_urls=[...]` (several API hosts on one store), a call or stream that cannot reach
its host, or hears that the host's store is unreachable (503, or a stream ended for that
reason), moves to the next host; a stream resumes there from its cursor at once
(`_failover.py` says which calls are sent again).
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import AsyncIterator, Mapping, Sequence
from datetime import datetime
from types import TracebackType
from typing import Any, Self, TypeVar

import httpx

from . import _calls, _tool_calls
from ._async_schedules import AsyncScheduleCalls
from ._backoff import Backoff
from ._calls import Call
from ._credentials import find_api_key
from ._errors import ApiError, ClientError, ProtocolError, TransportError, api_error, is_transient
from ._failover import Hosts, host_lost, moves_on, resendable, store_gone
from ._frames import SessionCursor, decode_owner, decode_session
from ._models import (
    Approval,
    BranchPoint,
    CancelResult,
    EventPage,
    EventRecord,
    OwnerBudgetInfo,
    OwnerStreamItem,
    PostResult,
    SessionDetail,
    SessionInfo,
    SessionPage,
    SessionUsage,
    StreamItem,
    UsageReport,
)
from ._sse import SSEParser
from ._tool_calls import _UNSET, ToolCallInfo, ToolFunction
from ._watchdog import Watchdog

__all__ = ["AsyncClient"]

log = logging.getLogger("outlive.client")

T = TypeVar("T")

PAGE_SIZE = 200
"""Sessions per page when reading the whole list (the API's maximum)."""


class AsyncClient(AsyncScheduleCalls):
    def __init__(
        self,
        base_url: str | None = None,
        api_key: str | None = None,
        *,
        timeout: float | httpx.Timeout = 10.0,
        stream_read_timeout: float | None = 37.5,
        transport: httpx.AsyncBaseTransport | None = None,
        rng: random.Random | None = None,
        base_urls: Sequence[str] | None = None,
    ) -> None:
        """`base_url` defaults to `OUTLIVE_URL` (else http://127.0.0.1:8765), `api_key` to
        `OUTLIVE_API_KEY`, else the key `outlive serve` wrote to ./outlive.db.key
        (`find_api_key`). `stream_read_timeout`: a stream silent this long (no event, no
        ping) is taken as dead and reconnected; once a server announces its ping interval,
        2.5 times that is used instead (`SILENCE_FACTOR`). `base_urls` (instead of
        `base_url`): several API hosts on the same store, used in turn when one fails."""
        if base_urls is not None and base_url is not None:
            raise ValueError("give base_url or base_urls, not both")
        self._hosts = Hosts(base_urls if base_urls is not None
                            else [_calls.resolve_base_url(base_url)])
        self.base_url = self._hosts.current
        self._timeout = _calls.timeouts(timeout)
        self._stream_timeout = _calls.stream_timeouts(self._timeout, stream_read_timeout)
        self._watchdog = Watchdog(stream_read_timeout)
        self._rng = rng or random.Random()
        self._http = httpx.AsyncClient(
            base_url=self.base_url,
            headers=_calls.client_headers(find_api_key(api_key)),
            timeout=self._timeout,
            transport=transport,
        )

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    def _failed(self, url: str) -> bool:
        """The host at `url` failed: use the next one (if any) from now on."""
        if not self._hosts.fail(url):
            return False
        if self._hosts.current != self.base_url:
            self.base_url = self._hosts.current
            self._http.base_url = httpx.URL(self.base_url)
        return True

    async def _call(self, call: Call[T]) -> T:
        for tries_left in range(len(self._hosts) - 1, -1, -1):
            used = self.base_url
            try:
                response = await self._http.request(
                    call.method, call.path, json=call.json, params=call.params,
                    headers=call.headers,
                )
            except httpx.TransportError as exc:
                if (tries_left and self._failed(used)
                        and resendable(call.method, call.json, call.headers, exc)):
                    continue
                raise TransportError(f"{call.method} {call.path}: {exc!r}") from exc
            if (moves_on(response) and tries_left and self._failed(used)
                    and resendable(call.method, call.json, call.headers, None)):
                continue
            return _calls.finish(call, response)
        raise AssertionError("unreachable: the last try returns or raises")

    # ---- sessions -----------------------------------------------------------------------

    async def create_session(
        self,
        prompt: str,
        *,
        agent: str | None = None,
        model: str | None = None,
        title: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        abandon_after: float | None = None,
        client_request_id: str | None = None,
        budget: Mapping[str, Any] | None = None,
        client_tools: Sequence[Mapping[str, Any]] | None = None,
        end_user: str | None = None,
    ) -> SessionInfo:
        """`client_tools`: tools this client runs (docs/client-tools.md; `client_tool(fn)`
        declares a function), offered to the model beside the agent's. `end_user`: your id
        of the person the session serves (docs/end-users.md)."""
        return await self._call(_calls.create_session(
            prompt, agent=agent, model=model, title=title, metadata=metadata,
            abandon_after=abandon_after, client_request_id=client_request_id,
            budget=budget, client_tools=client_tools, end_user=end_user,
        ))

    async def list_sessions(
        self, *, status: str | None = None, limit: int | None = None, cursor: str | None = None,
        attention: str | None = None, parent_id: str | None = None,
        end_user: str | None = None,
    ) -> SessionPage:
        """One page, newest first; pass `next_cursor` back as `cursor` for the next."""
        return await self._call(_calls.list_sessions(status=status, limit=limit, cursor=cursor,
                                               attention=attention, parent_id=parent_id,
                                               end_user=end_user))

    async def list_all_sessions(
        self, *, status: str | None = None, page_size: int = PAGE_SIZE,
        attention: str | None = None, parent_id: str | None = None,
        end_user: str | None = None,
    ) -> list[SessionInfo]:
        """Every page, newest first."""
        out: list[SessionInfo] = []
        cursor: str | None = None
        seen: set[str] = set()
        while True:
            page = await self.list_sessions(status=status, limit=page_size, cursor=cursor,
                                        attention=attention, parent_id=parent_id,
                                        end_user=end_user)
            out.extend(page.sessions)
            if page.next_cursor is None:
                return out
            if page.next_cursor in seen:
                raise ProtocolError(f"the session list repeats cursor {page.next_cursor!r}")
            seen.add(page.next_cursor)
            cursor = page.next_cursor

    async def get_session(self, session_id: str) -> SessionDetail:
        return await self._call(_calls.get_session(session_id))

    async def set_title(self, session_id: str, title: str) -> SessionInfo:
        return await self._call(_calls.set_title(session_id, title))

    async def set_budget(self, session_id: str,
                   budget: Mapping[str, Any] | None) -> SessionInfo:
        """Set (None: remove) the session's budget; one its budget stopped continues when
        the new one allows more."""
        return await self._call(_calls.set_budget(session_id, budget))

    async def delete_session(self, session_id: str) -> None:
        await self._call(_calls.delete_session(session_id))

    async def send_message(
        self,
        session_id: str,
        text: str,
        *,
        mode: str | None = None,
        client_request_id: str | None = None,
        client_tools: Sequence[Mapping[str, Any]] | None = None,
    ) -> PostResult:
        """`client_tools` (not None) replace the session's for its runs from this message
        on."""
        return await self._call(_calls.send_message(
            session_id, text, mode=mode, client_request_id=client_request_id,
            client_tools=client_tools,
        ))

    async def tool_calls(self, session_id: str) -> list[ToolCallInfo]:
        """The session's client tool calls, waiting and decided, oldest first."""
        return await self._call(_tool_calls.tool_calls(session_id))

    async def submit_tool_result(self, session_id: str, call_id: str, *, output: Any = _UNSET,
                           error: str | None = None) -> ToolCallInfo:
        """Deliver the result of a client tool call (exactly one of `output`, any JSON
        value, and `error`, what the model is told went wrong). The first result wins and
        the session's last waiting one resumes the run; the same again answers the same; a
        different one raises ApiError 409 TOOL_RESULT_CONFLICT."""
        return await self._call(_tool_calls.submit_result(session_id, call_id, output=output,
                                                       error=error))

    async def run_client_tools(
        self, session_id: str, functions: Mapping[str, ToolFunction] | Sequence[ToolFunction],
        *, poll: float = 0.25,
    ) -> SessionInfo:
        """Run the session's client tool calls with local Python functions (a list, each
        the tool of its name, or a mapping of tool names) until the session ends, and
        return it. A call of another tool is left to another client; a call another client
        answered first is skipped. Bound it with `asyncio.timeout`."""
        _, named = _tool_calls.declarations(functions)
        while True:
            for call in await self.tool_calls(session_id):
                fn = named.get(call.name)
                if not call.pending or fn is None:
                    continue
                result = await _tool_calls.result_of(fn, call.args)
                try:
                    await self.submit_tool_result(session_id, call.call_id, **result)
                except ApiError as exc:
                    if exc.code != "TOOL_RESULT_CONFLICT":
                        raise
            session = (await self.get_session(session_id)).session
            if session.terminal:
                return session
            await asyncio.sleep(poll)

    async def approvals(self, session_id: str) -> list[Approval]:
        """The session's approvals, pending and decided, oldest first."""
        return await self._call(_calls.approvals(session_id))

    async def approve(
        self, session_id: str, approval_id: str, *, reason: str | None = None,
        always: bool = False,
    ) -> Approval:
        """Let the waiting tool call run (`always`: and every later call of that tool in
        this session). Approving twice answers the same; after a denial or expiry it raises
        ApiError 409 APPROVAL_ALREADY_DECIDED."""
        return await self._call(_calls.decide(session_id, approval_id, "approve", reason=reason,
                                    always=always))

    async def deny(
        self, session_id: str, approval_id: str, *, reason: str | None = None,
        always: bool = False,
    ) -> Approval:
        """Refuse the waiting tool call; the model is told, with `reason`."""
        return await self._call(_calls.decide(session_id, approval_id, "deny", reason=reason,
                                    always=always))

    async def cancel(self, session_id: str) -> CancelResult:
        """Ask the run to stop. A session that has already ended (409
        SESSION_ALREADY_TERMINAL) is a success too: `status` is its terminal status and
        `already_terminal` is True. Any other error raises."""
        return await self._call(_calls.cancel(session_id))

    async def compact(self, session_id: str) -> SessionInfo:
        """Ask for the session's history to be compacted (`compact_requested` until a run
        has done it): a running session's run does it at its next step, a finished one is
        queued for a run that does. 409 SESSION_CANNOT_COMPACT (cancelled, or waiting on an
        approval) raises ApiError."""
        return await self._call(_calls.compact(session_id))

    async def fork(self, session_id: str, *, at_seq: int | None = None,
                   before_message: int | None = None, prompt: str | None = None
                   ) -> SessionInfo:
        """A new session whose history and transcript are this one's up to the settled
        point at or before `at_seq` (or just before the user message `before_message`);
        waiting for a message, or queued with `prompt` (docs/branches.md)."""
        return await self._call(_calls.fork(session_id, at_seq=at_seq,
                                            before_message=before_message, prompt=prompt))

    async def edit_message(self, session_id: str, seq: int, text: str) -> SessionInfo:
        """Edit and resend the user message at `seq`: a fork just before it, `text` first."""
        return await self._call(_calls.edit_message(session_id, seq, text))

    async def regenerate(self, session_id: str) -> SessionInfo:
        """A fork just before the last user message, sent again: a new answer to it."""
        return await self._call(_calls.regenerate(session_id))

    async def branches(self, session_id: str) -> list[BranchPoint]:
        """The branch points of the session's transcript, each with its siblings."""
        return await self._call(_calls.branches(session_id))

    async def session_usage(self, session_id: str) -> SessionUsage:
        """What the session's model calls used and cost: its totals and every call."""
        return await self._call(_calls.session_usage(session_id))

    async def usage(self, *, start: str | datetime | None = None,
                    end: str | datetime | None = None, group_by: str = "day",
                    end_user: str | None = None) -> UsageReport:
        """The owner's model calls over [start, end) (times or dates; default the last 30
        days), summed per `day`, `model` route, `agent`, `session` or `end_user`; with
        `end_user`, only that end user's."""
        return await self._call(_calls.usage(start=start, end=end,
                                             group_by=group_by, end_user=end_user))

    async def owner_budget(self) -> OwnerBudgetInfo:
        """The owner's monthly budget and what this month used and holds."""
        return await self._call(_calls.owner_budget())

    async def set_owner_budget(self, monthly: Mapping[str, Any] | None) -> OwnerBudgetInfo:
        """Set (None: remove) the owner's monthly caps; sessions a budget stopped that no
        budget stops now continue."""
        return await self._call(_calls.set_owner_budget(monthly))

    async def healthz(self) -> bool:
        return await self._call(_calls.healthz())

    # ---- events ---------------------------------------------------------------------------

    async def events(
        self, session_id: str, *, after: int = 0, limit: int | None = None
    ) -> EventPage:
        """One JSON page of the stored event log (events with seq > after)."""
        return await self._call(_calls.events(session_id, after=after, limit=limit))

    async def all_events(self, session_id: str, *, after: int = 0) -> list[EventRecord]:
        """The stored log after `after`, every page."""
        out: list[EventRecord] = []
        while True:
            page = await self.events(session_id, after=after)
            out.extend(page.events)
            if not page.events or page.events[-1].seq >= page.last_seq:
                return out
            after = page.events[-1].seq

    async def stream(
        self, session_id: str, after: int | None = None, until_end: bool = False
    ) -> AsyncIterator[StreamItem]:
        """The session's frames, across reconnects: `attached`, then (with no `after`) a
        `snapshot`, every event after the cursor, `caught_up`, then live events. Each
        reconnect yields `attached` (and `caught_up`) again but never an event twice. With
        `until_end` it ends after `session_end` (at once if the session already ended)."""
        state = SessionCursor(after, until_end)
        backoff = Backoff(self._rng)
        path = _calls.session_path(session_id, "/events")
        moves = 0  # hosts tried since the last frame heard: a whole ring, then back off
        while True:
            used = self.base_url
            parser = SSEParser()
            try:
                async with self._open_sse(path, state.headers(), state.params()) as response:
                    async for chunk in self._watchdog.watch(response.aiter_bytes()):
                        for msg in parser.feed(chunk):
                            item = decode_session(msg)
                            if item is None:
                                continue
                            self._watchdog.heard(item)
                            backoff.reset()
                            moves = 0
                            if state.accept(item):
                                yield item
                            if state.done:
                                return
                failed = store_gone(parser.last_comment)
            except (ClientError, httpx.TransportError) as exc:
                if not is_transient(exc) or state.give_up(exc):
                    raise
                log.debug("session stream %s: %r; reconnecting", session_id, exc)
                failed = host_lost(exc)
            if failed and moves < len(self._hosts) - 1 and self._failed(used):
                moves += 1
                log.debug("session stream %s: moving to %s", session_id, self.base_url)
                continue
            delay = backoff.next()
            log.debug("session stream %s: reconnecting in %.2fs", session_id, delay)
            await asyncio.sleep(delay)

    async def owner_stream(self, after: int | None = None) -> AsyncIterator[OwnerStreamItem]:
        """ONE connection to the owner stream (`GET /v1/events`): owner events after `after`
        (with no cursor: from now on), `caught_up`, `resync_required`, and frames that did not
        validate as `MalformedFrame`. It ends when the connection does and raises its errors;
        `SessionWatcher` adds reconnects, list fetches and health on top."""
        headers = {"Accept": "text/event-stream"}
        if after is not None:
            headers["Last-Event-ID"] = str(after)
        async with self._open_sse("/v1/events", headers, {}) as response:
            parser = SSEParser()
            async for chunk in self._watchdog.watch(response.aiter_bytes()):
                for msg in parser.feed(chunk):
                    item = decode_owner(msg)
                    if item is not None:
                        self._watchdog.heard(item)
                        yield item

    def _open_sse(
        self, path: str, headers: Mapping[str, str], params: Mapping[str, str]
    ) -> _SSEResponse:
        timeout = self._stream_timeout
        if self._watchdog.limit is not None:  # waiting for the answer is bounded the same way
            timeout = _calls.stream_timeouts(self._timeout, self._watchdog.limit)
        request = self._http.build_request(
            "GET", path, headers=headers, params=params, timeout=timeout
        )
        return _SSEResponse(self._http, request)


class _SSEResponse:
    """`async with`: an open `text/event-stream` response, or the error it was instead."""

    def __init__(self, http: httpx.AsyncClient, request: httpx.Request) -> None:
        self._http = http
        self._request = request
        self._response: httpx.Response | None = None

    async def __aenter__(self) -> httpx.Response:
        try:
            response = await self._http.send(self._request, stream=True)
        except httpx.TransportError as exc:
            raise TransportError(f"GET {self._request.url.path}: {exc!r}") from exc
        self._response = response
        try:
            if response.status_code != 200:
                await response.aread()
                raise api_error(response)
            ctype = response.headers.get("content-type", "")
            if not ctype.startswith("text/event-stream"):
                raise ProtocolError(f"expected an event stream, got {ctype!r}")
        except BaseException:
            await response.aclose()
            raise
        return response

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._response is not None:
            await self._response.aclose()
