"""Client tools (docs/client-tools.md) for both clients: the routes as `Call`s, the
declaration of a local Python function as a client tool, and running one call of it.

A function becomes a tool named after it, described by its docstring, its parameters the JSON
Schema of its signature (annotated parameters; defaults make them optional). Running a call
validates the model's arguments against the signature, calls the function (awaiting it when
it is a coroutine function) and turns its return value into `{"output": ...}`, or what it
raised into `{"error": {"message": ...}}`: the model sees a failure as a tool error.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model

from ._calls import Call, session_path
from ._models import _Model

__all__ = ["ToolCallInfo", "client_tool", "declarations", "result_of", "result_of_sync",
           "submit_result", "tool_calls"]

ToolFunction = Callable[..., Any]


class ToolCallInfo(_Model):
    """A client tool call of a session: waiting (`pending`) or decided."""

    call_id: str
    session_id: str
    name: str
    args: dict[str, Any] = Field(default_factory=dict)
    status: str
    """`pending`, `answered`, `expired` (its timeout passed) or `cancelled`."""
    result: dict[str, Any] | None = None
    requested_at: datetime
    expires_at: datetime | None = None
    decided_at: datetime | None = None

    @property
    def pending(self) -> bool:
        return self.status == "pending"


def tool_calls(session_id: str) -> Call[list[ToolCallInfo]]:
    return Call("GET", session_path(session_id, "/tool-calls"),
                lambda body: [ToolCallInfo.model_validate(c) for c in body["tool_calls"]])


_UNSET: Any = object()


def submit_result(session_id: str, call_id: str, *, output: Any = _UNSET,
                  error: str | None = None) -> Call[ToolCallInfo]:
    """The first result wins; the same again answers the same; another raises ApiError 409
    TOOL_RESULT_CONFLICT."""
    if not call_id:
        raise ValueError("call_id must not be empty")
    if (output is _UNSET) == (error is None):
        raise ValueError("give exactly one of output and error")
    body: dict[str, Any] = {"call_id": call_id}
    if error is not None:
        body["error"] = error
    else:
        body["output"] = output
    return Call("POST", session_path(session_id, "/tool-results"), ToolCallInfo.model_validate,
                json=body)


def _args_model(fn: ToolFunction) -> type[BaseModel]:
    fields: dict[str, Any] = {}
    for name, p in inspect.signature(fn).parameters.items():
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        annotation = Any if p.annotation is p.empty else p.annotation
        fields[name] = (annotation, ... if p.default is p.empty else p.default)
    model: type[BaseModel] = create_model(
        f"{fn.__name__}_args", __config__=ConfigDict(extra="forbid"), **fields)
    return model


def client_tool(fn: ToolFunction, *, name: str | None = None,
                timeout: float | None = None) -> dict[str, Any]:
    """The declaration of `fn` as a client tool (`client_tools=[...]` of a create or a
    message)."""
    schema = _args_model(fn).model_json_schema()
    schema.pop("title", None)
    out: dict[str, Any] = {"name": name or fn.__name__,
                           "description": inspect.getdoc(fn) or "",
                           "parameters": schema}
    if timeout is not None:
        out["timeout"] = timeout
    return out


def declarations(functions: Mapping[str, ToolFunction] | Sequence[ToolFunction]
                 ) -> tuple[list[dict[str, Any]], dict[str, ToolFunction]]:
    """The declarations of `functions` (a list, named after each function, or a mapping of
    names), and the functions by tool name."""
    named = (dict(functions) if isinstance(functions, Mapping)
             else {f.__name__: f for f in functions})
    return [client_tool(f, name=n) for n, f in named.items()], named


async def result_of(fn: ToolFunction, args: Mapping[str, Any]) -> dict[str, Any]:
    """Run one call: `{"output": ...}` (JSON-ready), or `{"error": "..."}` for arguments
    that do not fit the signature or an exception the function raised."""
    try:
        value = fn(**_checked(fn, args))
        if inspect.isawaitable(value):
            value = await value
        json.dumps(value)
    except ValidationError as exc:
        return {"error": f"bad arguments: {exc.errors(include_url=False)}"}
    except Exception as exc:
        return {"error": f"{type(exc).__name__}: {exc}"}
    return {"output": value}


def result_of_sync(fn: ToolFunction, args: Mapping[str, Any]) -> dict[str, Any]:
    """`result_of` for the blocking client: `fn` must be a plain function."""
    if inspect.iscoroutinefunction(fn):
        return {"error": "this client runs only plain functions; use AsyncClient"}
    try:
        value = fn(**_checked(fn, args))
        json.dumps(value)
    except ValidationError as exc:
        return {"error": f"bad arguments: {exc.errors(include_url=False)}"}
    except Exception as exc:
        return {"error": f"{type(exc).__name__}: {exc}"}
    return {"output": value}


def _checked(fn: ToolFunction, args: Mapping[str, Any]) -> dict[str, Any]:
    valid = _args_model(fn).model_validate(dict(args))
    return {k: getattr(valid, k) for k in type(valid).model_fields}
