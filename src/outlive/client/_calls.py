"""The endpoints as data: each call is a method, a path, a body and a parser, so the async
and the sync client send the same requests and read the same answers (docs/http-api.md)."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Generic, TypeVar
from urllib.parse import quote

import httpx
from pydantic import ValidationError

from ._constants import DEFAULT_URL
from ._errors import ApiError, ProtocolError, error_from_response
from ._models import (
    TERMINAL_STATUSES,
    Approval,
    BranchPoint,
    CancelResult,
    EventPage,
    OwnerBudgetInfo,
    PostResult,
    SessionDetail,
    SessionInfo,
    SessionPage,
    SessionUsage,
    UsageReport,
)

__all__ = [
    "Call",
    "branches",
    "cancel",
    "client_headers",
    "compact",
    "create_session",
    "delete_session",
    "edit_message",
    "events",
    "finish",
    "fork",
    "get_session",
    "healthz",
    "list_sessions",
    "owner_budget",
    "resolve_base_url",
    "send_message",
    "session_path",
    "session_usage",
    "set_owner_budget",
    "set_title",
    "stream_timeouts",
    "timeouts",
    "usage",
]

T = TypeVar("T")

_USER_AGENT = "outlive-client/0.1"


def resolve_base_url(base_url: str | None) -> str:
    url = base_url or os.environ.get("OUTLIVE_URL") or DEFAULT_URL
    return url.rstrip("/")


def client_headers(api_key: str | None) -> dict[str, str]:
    headers = {"User-Agent": _USER_AGENT, "Accept": "application/json"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    return headers


def timeouts(timeout: float | httpx.Timeout) -> httpx.Timeout:
    return timeout if isinstance(timeout, httpx.Timeout) else httpx.Timeout(timeout)


def stream_timeouts(base: httpx.Timeout, read: float | None) -> httpx.Timeout:
    """`base` with the read timeout of a stream (longer than the server's ping interval)."""
    return httpx.Timeout(connect=base.connect, read=read, write=base.write, pool=base.pool)


def session_path(session_id: str, tail: str = "") -> str:
    if not session_id:
        raise ValueError("session_id must not be empty")
    return f"/v1/sessions/{quote(session_id, safe='')}{tail}"


@dataclass(frozen=True)
class Call(Generic[T]):
    method: str
    path: str
    parse: Callable[[Any], T]
    json: Any = None
    params: Mapping[str, str | int] | None = None
    headers: Mapping[str, str] | None = None
    recover: Callable[[ApiError], T | None] | None = None
    """Turns some errors into a result (cancel's SESSION_ALREADY_TERMINAL); None re-raises."""


def finish(call: Call[T], response: httpx.Response) -> T:
    """The call's result from its (fully read) response, or the ApiError it means."""
    if not response.is_success:
        err = error_from_response(
            response.status_code, response.content, response.reason_phrase
        )
        if call.recover is not None:
            result = call.recover(err)
            if result is not None:
                return result
        raise err
    try:
        body = json.loads(response.content) if response.content else None
        return call.parse(body)
    except (ValueError, ValidationError) as exc:
        raise ProtocolError(
            f"{call.method} {call.path}: unexpected answer ({response.status_code}): {exc}"
        ) from exc


def _drop_none(d: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in d.items() if v is not None}


def create_session(
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
) -> Call[SessionInfo]:
    body = _drop_none(
        {"prompt": prompt, "agent": agent, "model": model, "title": title,
         "metadata": dict(metadata) if metadata is not None else None,
         "abandon_after": abandon_after, "client_request_id": client_request_id,
         "budget": dict(budget) if budget is not None else None,
         "client_tools": [dict(t) for t in client_tools] if client_tools is not None
         else None, "end_user": end_user}
    )
    return Call("POST", "/v1/sessions", SessionInfo.model_validate, json=body)


def list_sessions(
    *, status: str | None = None, limit: int | None = None, cursor: str | None = None,
    attention: str | None = None, parent_id: str | None = None, end_user: str | None = None,
) -> Call[SessionPage]:
    params = _drop_none({"status": status, "limit": limit, "cursor": cursor,
                         "attention": attention, "parent_id": parent_id,
                         "end_user": end_user})
    return Call("GET", "/v1/sessions", SessionPage.model_validate, params=params)


def get_session(session_id: str) -> Call[SessionDetail]:
    return Call("GET", session_path(session_id), SessionDetail.model_validate)


def set_title(session_id: str, title: str) -> Call[SessionInfo]:
    return Call("PATCH", session_path(session_id), SessionInfo.model_validate,
                json={"title": title})


def set_budget(session_id: str, budget: Mapping[str, Any] | None) -> Call[SessionInfo]:
    return Call("PATCH", session_path(session_id), SessionInfo.model_validate,
                json={"budget": dict(budget) if budget is not None else None})


def delete_session(session_id: str) -> Call[None]:
    return Call("DELETE", session_path(session_id), lambda _body: None)


def send_message(
    session_id: str,
    text: str,
    *,
    mode: str | None = None,
    client_request_id: str | None = None,
    client_tools: Sequence[Mapping[str, Any]] | None = None,
) -> Call[PostResult]:
    body = _drop_none({"text": text, "mode": mode, "client_request_id": client_request_id,
                       "client_tools": [dict(t) for t in client_tools]
                       if client_tools is not None else None})
    return Call("POST", session_path(session_id, "/messages"), PostResult.model_validate,
                json=body)


def approvals(session_id: str) -> Call[list[Approval]]:
    return Call("GET", session_path(session_id, "/approvals"),
                lambda body: [Approval.model_validate(a) for a in body["approvals"]])


def decide(
    session_id: str, approval_id: str, decision: str, *, reason: str | None = None,
    always: bool = False,
) -> Call[Approval]:
    """The server checks it: a repeat of the same decision answers the same; the other
    decision raises ApiError 409 APPROVAL_ALREADY_DECIDED."""
    if not approval_id:
        raise ValueError("approval_id must not be empty")
    body = _drop_none({"decision": decision, "reason": reason, "always": always or None})
    return Call("POST", session_path(session_id, f"/approvals/{quote(approval_id, safe='')}"),
                Approval.model_validate, json=body)


def _already_terminal(err: ApiError) -> CancelResult | None:
    status = err.details.get("status")
    if (
        err.status == 409
        and err.code == "SESSION_ALREADY_TERMINAL"
        and isinstance(status, str)
        and status in TERMINAL_STATUSES
    ):
        return CancelResult(cancel_requested=False, status=status, already_terminal=True)
    return None


def cancel(session_id: str) -> Call[CancelResult]:
    """409 SESSION_ALREADY_TERMINAL is a success: the session has ended, with that status."""
    return Call("POST", session_path(session_id, "/cancel"), CancelResult.model_validate,
                recover=_already_terminal)


def compact(session_id: str) -> Call[SessionInfo]:
    """The session as the request left it; a session that cannot compact now raises ApiError
    409 SESSION_CANNOT_COMPACT (its message says what to do first)."""
    return Call("POST", session_path(session_id, "/compact"), SessionInfo.model_validate)


def session_usage(session_id: str) -> Call[SessionUsage]:
    return Call("GET", session_path(session_id, "/usage"), SessionUsage.model_validate)


def _iso(value: str | datetime | None) -> str | None:
    return value.isoformat() if isinstance(value, datetime) else value


def usage(*, start: str | datetime | None = None, end: str | datetime | None = None,
          group_by: str = "day", end_user: str | None = None) -> Call[UsageReport]:
    """`start` and `end`: RFC 3339 times or dates (the server's defaults: the 30 days
    before now). `end_user`: only that end user's sessions (docs/end-users.md)."""
    params = _drop_none({"from": _iso(start), "to": _iso(end), "group_by": group_by,
                         "end_user": end_user})
    return Call("GET", "/v1/usage", UsageReport.model_validate, params=params)


def owner_budget() -> Call[OwnerBudgetInfo]:
    return Call("GET", "/v1/budget", OwnerBudgetInfo.model_validate)


def set_owner_budget(monthly: Mapping[str, Any] | None) -> Call[OwnerBudgetInfo]:
    return Call("PUT", "/v1/budget", OwnerBudgetInfo.model_validate,
                json={"monthly": dict(monthly) if monthly is not None else None})


def events(session_id: str, *, after: int = 0, limit: int | None = None) -> Call[EventPage]:
    params = _drop_none({"after": after, "limit": limit})
    return Call("GET", session_path(session_id, "/events"), EventPage.model_validate,
                params=params, headers={"Accept": "application/json"})


def _ok(body: Any) -> bool:
    return isinstance(body, dict) and body.get("ok") is True


def healthz() -> Call[bool]:
    return Call("GET", "/healthz", _ok, recover=lambda err: False if err.status == 503 else None)


def fork(session_id: str, *, at_seq: int | None = None, before_message: int | None = None,
         prompt: str | None = None) -> Call[SessionInfo]:
    """A fork of the session at the settled point at or before `at_seq` (or just before the
    user message `before_message`), queued with `prompt` as its first message if given."""
    body: dict[str, Any] = {k: v for k, v in (("at_seq", at_seq),
                                              ("before_message", before_message),
                                              ("prompt", prompt)) if v is not None}
    return Call("POST", session_path(session_id, "/fork"), SessionInfo.model_validate,
                json=body)


def edit_message(session_id: str, seq: int, text: str) -> Call[SessionInfo]:
    return Call("POST", session_path(session_id, f"/messages/{int(seq)}/edit"),
                SessionInfo.model_validate, json={"text": text})


def regenerate(session_id: str) -> Call[SessionInfo]:
    return Call("POST", session_path(session_id, "/regenerate"), SessionInfo.model_validate)


def branches(session_id: str) -> Call[list[BranchPoint]]:
    return Call("GET", session_path(session_id, "/branches"),
                lambda body: [BranchPoint.model_validate(p) for p in body["points"]])
