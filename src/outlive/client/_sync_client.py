"""`Client`: the synchronous twin of `AsyncClient` (same methods, same results, same errors),
for scripts and notebooks. Its `stream()` is a plain iterator with the same reconnects."""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import datetime
from types import TracebackType
from typing import Any, Self, TypeVar

import httpx

from . import _calls, _schedule_calls, _tool_calls
from ._async_client import PAGE_SIZE
from ._backoff import Backoff
from ._calls import Call
from ._credentials import find_api_key
from ._errors import ApiError, ClientError, ProtocolError, TransportError, api_error, is_transient
from ._failover import Hosts, host_lost, moves_on, resendable, store_gone
from ._frames import SessionCursor, decode_session
from ._models import (
    Approval,
    BranchPoint,
    CancelResult,
    EventPage,
    EventRecord,
    OwnerBudgetInfo,
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

__all__ = ["Client"]

log = logging.getLogger("outlive.client")

T = TypeVar("T")


class Client:
    def __init__(
        self,
        base_url: str | None = None,
        api_key: str | None = None,
        *,
        timeout: float | httpx.Timeout = 10.0,
        stream_read_timeout: float | None = 37.5,
        transport: httpx.BaseTransport | None = None,
        rng: random.Random | None = None,
        base_urls: Sequence[str] | None = None,
    ) -> None:
        """Defaults as `AsyncClient`'s: `OUTLIVE_URL`, and `OUTLIVE_API_KEY` else
        ./outlive.db.key (`find_api_key`); `base_urls` as there (`_failover.py`)."""
        if base_urls is not None and base_url is not None:
            raise ValueError("give base_url or base_urls, not both")
        self._hosts = Hosts(base_urls if base_urls is not None
                            else [_calls.resolve_base_url(base_url)])
        self.base_url = self._hosts.current
        self._timeout = _calls.timeouts(timeout)
        self._stream_timeout = _calls.stream_timeouts(self._timeout, stream_read_timeout)
        self._rng = rng or random.Random()
        self._http = httpx.Client(
            base_url=self.base_url,
            headers=_calls.client_headers(find_api_key(api_key)),
            timeout=self._timeout,
            transport=transport,
        )

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def _failed(self, url: str) -> bool:
        """The host at `url` failed: use the next one (if any) from now on."""
        if not self._hosts.fail(url):
            return False
        if self._hosts.current != self.base_url:
            self.base_url = self._hosts.current
            self._http.base_url = httpx.URL(self.base_url)
        return True

    def _call(self, call: Call[T]) -> T:
        for tries_left in range(len(self._hosts) - 1, -1, -1):
            used = self.base_url
            try:
                response = self._http.request(
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

    def create_session(
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
        return self._call(_calls.create_session(
            prompt, agent=agent, model=model, title=title, metadata=metadata,
            abandon_after=abandon_after, client_request_id=client_request_id,
            budget=budget, client_tools=client_tools, end_user=end_user,
        ))

    def list_sessions(
        self, *, status: str | None = None, limit: int | None = None, cursor: str | None = None,
        attention: str | None = None, parent_id: str | None = None,
        end_user: str | None = None,
    ) -> SessionPage:
        return self._call(_calls.list_sessions(status=status, limit=limit, cursor=cursor,
                                               attention=attention, parent_id=parent_id,
                                               end_user=end_user))

    def list_all_sessions(
        self, *, status: str | None = None, page_size: int = PAGE_SIZE,
        attention: str | None = None, parent_id: str | None = None,
        end_user: str | None = None,
    ) -> list[SessionInfo]:
        out: list[SessionInfo] = []
        cursor: str | None = None
        seen: set[str] = set()
        while True:
            page = self.list_sessions(status=status, limit=page_size, cursor=cursor,
                                        attention=attention, parent_id=parent_id,
                                        end_user=end_user)
            out.extend(page.sessions)
            if page.next_cursor is None:
                return out
            if page.next_cursor in seen:
                raise ProtocolError(f"the session list repeats cursor {page.next_cursor!r}")
            seen.add(page.next_cursor)
            cursor = page.next_cursor

    def get_session(self, session_id: str) -> SessionDetail:
        return self._call(_calls.get_session(session_id))

    def set_title(self, session_id: str, title: str) -> SessionInfo:
        return self._call(_calls.set_title(session_id, title))

    def set_budget(self, session_id: str,
                   budget: Mapping[str, Any] | None) -> SessionInfo:
        """Set (None: remove) the session's budget; one its budget stopped continues when
        the new one allows more."""
        return self._call(_calls.set_budget(session_id, budget))

    def delete_session(self, session_id: str) -> None:
        self._call(_calls.delete_session(session_id))

    def send_message(
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
        return self._call(_calls.send_message(
            session_id, text, mode=mode, client_request_id=client_request_id,
            client_tools=client_tools,
        ))

    def tool_calls(self, session_id: str) -> list[ToolCallInfo]:
        """The session's client tool calls, waiting and decided, oldest first."""
        return self._call(_tool_calls.tool_calls(session_id))

    def submit_tool_result(self, session_id: str, call_id: str, *, output: Any = _UNSET,
                           error: str | None = None) -> ToolCallInfo:
        """Deliver the result of a client tool call (exactly one of `output`, any JSON
        value, and `error`, what the model is told went wrong). The first result wins and
        the session's last waiting one resumes the run; the same again answers the same; a
        different one raises ApiError 409 TOOL_RESULT_CONFLICT."""
        return self._call(_tool_calls.submit_result(session_id, call_id, output=output,
                                                       error=error))

    def run_client_tools(
        self, session_id: str, functions: Mapping[str, ToolFunction] | Sequence[ToolFunction],
        *, poll: float = 0.25, timeout: float | None = None,
    ) -> SessionInfo:
        """Run the session's client tool calls with local Python functions (a list, each
        the tool of its name, or a mapping of tool names) until the session ends, and
        return it. A call of another tool is left to another client; a call another client
        answered first is skipped. `timeout`: give up (TimeoutError) after that long."""
        _, named = _tool_calls.declarations(functions)
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            for call in self.tool_calls(session_id):
                fn = named.get(call.name)
                if not call.pending or fn is None:
                    continue
                result = _tool_calls.result_of_sync(fn, call.args)
                try:
                    self.submit_tool_result(session_id, call.call_id, **result)
                except ApiError as exc:
                    if exc.code != "TOOL_RESULT_CONFLICT":
                        raise
            session = (self.get_session(session_id)).session
            if session.terminal:
                return session
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError(f"session {session_id} did not end in {timeout} s")
            time.sleep(poll)

    def approvals(self, session_id: str) -> list[Approval]:
        """The session's approvals, pending and decided, oldest first."""
        return self._call(_calls.approvals(session_id))

    def approve(
        self, session_id: str, approval_id: str, *, reason: str | None = None,
        always: bool = False,
    ) -> Approval:
        """Let the waiting tool call run (`always`: and every later call of that tool in
        this session). Approving twice answers the same; after a denial or expiry it raises
        ApiError 409 APPROVAL_ALREADY_DECIDED."""
        return self._call(_calls.decide(session_id, approval_id, "approve", reason=reason,
                                    always=always))

    def deny(
        self, session_id: str, approval_id: str, *, reason: str | None = None,
        always: bool = False,
    ) -> Approval:
        """Refuse the waiting tool call; the model is told, with `reason`."""
        return self._call(_calls.decide(session_id, approval_id, "deny", reason=reason,
                                    always=always))

    def cancel(self, session_id: str) -> CancelResult:
        """As `AsyncClient.cancel`: 409 SESSION_ALREADY_TERMINAL returns the final status."""
        return self._call(_calls.cancel(session_id))

    def compact(self, session_id: str) -> SessionInfo:
        """As `AsyncClient.compact`."""
        return self._call(_calls.compact(session_id))

    def fork(self, session_id: str, *, at_seq: int | None = None,
             before_message: int | None = None, prompt: str | None = None) -> SessionInfo:
        """As `AsyncClient.fork`."""
        return self._call(_calls.fork(session_id, at_seq=at_seq,
                                      before_message=before_message, prompt=prompt))

    def edit_message(self, session_id: str, seq: int, text: str) -> SessionInfo:
        """As `AsyncClient.edit_message`."""
        return self._call(_calls.edit_message(session_id, seq, text))

    def regenerate(self, session_id: str) -> SessionInfo:
        """As `AsyncClient.regenerate`."""
        return self._call(_calls.regenerate(session_id))

    def branches(self, session_id: str) -> list[BranchPoint]:
        """As `AsyncClient.branches`."""
        return self._call(_calls.branches(session_id))

    def session_usage(self, session_id: str) -> SessionUsage:
        """As `AsyncClient.session_usage`."""
        return self._call(_calls.session_usage(session_id))

    def usage(self, *, start: str | datetime | None = None, end: str | datetime | None = None,
              group_by: str = "day", end_user: str | None = None) -> UsageReport:
        """As `AsyncClient.usage`."""
        return self._call(_calls.usage(start=start, end=end, group_by=group_by,
                                       end_user=end_user))

    def owner_budget(self) -> OwnerBudgetInfo:
        """As `AsyncClient.owner_budget`."""
        return self._call(_calls.owner_budget())

    def set_owner_budget(self, monthly: Mapping[str, Any] | None) -> OwnerBudgetInfo:
        """As `AsyncClient.set_owner_budget`."""
        return self._call(_calls.set_owner_budget(monthly))

    # ---- schedules (docs/schedules.md): the API's JSON objects -------------------------

    def create_schedule(self, prompt: str, **fields: Any) -> dict[str, Any]:
        """`fields`: cron or every, timezone, agent, model, target, overlap, catch_up."""
        return self._call(_schedule_calls.create_schedule(prompt, **fields))

    def schedules(self, *, limit: int | None = None,
                    cursor: str | None = None) -> dict[str, Any]:
        return self._call(_schedule_calls.list_schedules(limit=limit, cursor=cursor))

    def pause_schedule(self, schedule_id: str) -> dict[str, Any]:
        return self._call(_schedule_calls.set_paused(schedule_id, True))

    def resume_schedule(self, schedule_id: str) -> dict[str, Any]:
        return self._call(_schedule_calls.set_paused(schedule_id, False))

    def delete_schedule(self, schedule_id: str) -> dict[str, Any]:
        return self._call(_schedule_calls.delete_schedule(schedule_id))

    def schedule_runs(self, schedule_id: str, *, limit: int | None = None) -> dict[str, Any]:
        return self._call(_schedule_calls.schedule_runs(schedule_id, limit=limit))

    def schedule_message(self, session_id: str, text: str, *, delay: float | None = None,
                         deliver_at: str | None = None,
                         mode: str | None = None) -> dict[str, Any]:
        """A follow-up posted `delay` seconds from now or at `deliver_at` (RFC 3339)."""
        return self._call(_schedule_calls.schedule_message(
            session_id, text, delay=delay, deliver_at=deliver_at, mode=mode))

    def cancel_scheduled(self, session_id: str, message_id: str) -> dict[str, Any]:
        return self._call(_schedule_calls.cancel_scheduled(session_id, message_id))

    def scheduled(self, session_id: str) -> dict[str, Any]:
        """The session's messages waiting for their time."""
        return self._call(_schedule_calls.scheduled(session_id))

    def healthz(self) -> bool:
        return self._call(_calls.healthz())

    def events(self, session_id: str, *, after: int = 0, limit: int | None = None) -> EventPage:
        return self._call(_calls.events(session_id, after=after, limit=limit))

    def all_events(self, session_id: str, *, after: int = 0) -> list[EventRecord]:
        out: list[EventRecord] = []
        while True:
            page = self.events(session_id, after=after)
            out.extend(page.events)
            if not page.events or page.events[-1].seq >= page.last_seq:
                return out
            after = page.events[-1].seq

    def stream(
        self, session_id: str, after: int | None = None, until_end: bool = False
    ) -> Iterator[StreamItem]:
        """As `AsyncClient.stream`, blocking."""
        state = SessionCursor(after, until_end)
        backoff = Backoff(self._rng)
        path = _calls.session_path(session_id, "/events")
        moves = 0  # hosts tried since the last frame heard: a whole ring, then back off
        while True:
            used = self.base_url
            parser = SSEParser()
            try:
                with self._open_sse(path, state.headers(), state.params()) as response:
                    for chunk in response.iter_bytes():
                        for msg in parser.feed(chunk):
                            item = decode_session(msg)
                            if item is None:
                                continue
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
                continue
            time.sleep(backoff.next())

    @contextmanager
    def _open_sse(
        self, path: str, headers: Mapping[str, str], params: Mapping[str, str]
    ) -> Iterator[httpx.Response]:
        request = self._http.build_request(
            "GET", path, headers=headers, params=params, timeout=self._stream_timeout
        )
        try:
            response = self._http.send(request, stream=True)
        except httpx.TransportError as exc:
            raise TransportError(f"GET {path}: {exc!r}") from exc
        try:
            if response.status_code != 200:
                response.read()
                raise api_error(response)
            ctype = response.headers.get("content-type", "")
            if not ctype.startswith("text/event-stream"):
                raise ProtocolError(f"expected an event stream, got {ctype!r}")
            yield response
        finally:
            response.close()
