"""The schedule routes as `Call`s (docs/schedules.md), shared by both clients: their bodies
come back as the API's JSON objects."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from ._calls import Call, session_path

__all__ = ["cancel_scheduled", "create_schedule", "delete_schedule", "list_schedules",
           "schedule_message", "schedule_runs", "scheduled", "set_paused"]

Json = dict[str, Any]


def _json(body: Any) -> Json:
    return body if isinstance(body, dict) else {"value": body}


def _path(schedule_id: str, tail: str = "") -> str:
    if not schedule_id:
        raise ValueError("schedule_id must not be empty")
    return f"/v1/schedules/{quote(schedule_id, safe='')}{tail}"


def create_schedule(prompt: str, **fields: Any) -> Call[Json]:
    body = {"prompt": prompt, **{k: v for k, v in fields.items() if v is not None}}
    return Call("POST", "/v1/schedules", _json, json=body)


def list_schedules(*, limit: int | None = None, cursor: str | None = None) -> Call[Json]:
    params = {k: v for k, v in (("limit", limit), ("cursor", cursor)) if v is not None}
    return Call("GET", "/v1/schedules", _json, params=params)


def set_paused(schedule_id: str, paused: bool) -> Call[Json]:
    return Call("POST", _path(schedule_id, "/pause" if paused else "/resume"), _json)


def delete_schedule(schedule_id: str) -> Call[Json]:
    return Call("DELETE", _path(schedule_id), _json)


def schedule_runs(schedule_id: str, *, limit: int | None = None) -> Call[Json]:
    params = {} if limit is None else {"limit": limit}
    return Call("GET", _path(schedule_id, "/runs"), _json, params=params)


def scheduled(session_id: str) -> Call[Json]:
    return Call("GET", session_path(session_id, "/scheduled"), _json)


def schedule_message(session_id: str, text: str, *, delay: float | None = None,
                     deliver_at: str | None = None, mode: str | None = None) -> Call[Json]:
    body = {k: v for k, v in (("text", text), ("delay", delay), ("deliver_at", deliver_at),
                              ("mode", mode)) if v is not None}
    return Call("POST", session_path(session_id, "/messages"), _json, json=body)


def cancel_scheduled(session_id: str, message_id: str) -> Call[Json]:
    return Call("DELETE", session_path(session_id, f"/scheduled/{quote(message_id, safe='')}"),
                _json)
