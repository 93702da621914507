"""Client tools: tools the model calls that a client runs (docs/client-tools.md).

A client declares them (`{name, description, parameters}`, the parameters a JSON Schema) on a
session; the model sees them beside the agent's own tools. A call of one stops the run: it is
written (`client_tool_call`) and waits, without a lease, on the approvals' machinery (a row of
kind `client_tool`), until the client posts its result. The first result wins; the same one
again answers the same; a different one is a conflict. A call nobody answers in its time, or
one whose session was cancelled while it waited, is a tool error the model sees.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from .errors import Conflict, InvalidInput
from .tool_calls import ToolSpec

__all__ = [
    "MAX_CLIENT_TOOLS",
    "NO_TIMEOUT",
    "ClientCall",
    "ClientTool",
    "ClientToolResultConflict",
    "check_no_clash",
    "client_error",
    "parse_client_tools",
    "parse_result",
    "tools_to_json",
]

MAX_CLIENT_TOOLS = 64
NO_TIMEOUT = 100 * 365 * 24 * 3600.0
"""The wait of a call without a timeout: as good as forever (the row needs an expiry)."""
_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_MAX_DESCRIPTION = 4000
_MAX_SCHEMA_CHARS = 32_000


class ClientToolResultConflict(Conflict):
    """A different result for a call already decided: the first one stands."""

    code = "TOOL_RESULT_CONFLICT"


@dataclass(frozen=True)
class ClientTool:
    """A tool the session's client runs: what the model is told, and how long a call of it
    may wait for its result (None: as long as it takes)."""

    name: str
    description: str
    parameters: dict[str, Any]
    timeout: float | None = None
    strict: bool = False

    def spec(self) -> ToolSpec:
        return ToolSpec(self.name, self.description, self.parameters, strict=self.strict,
                        client=True)


@dataclass(frozen=True)
class ClientCall:
    """A client tool call a run waits on, with how long its client has (None: no limit)."""

    call_id: str
    name: str
    args: dict[str, Any]
    timeout: float | None = None


def _schema_size(value: Any) -> int:
    return len(repr(value))


def parse_client_tools(raw: Any) -> tuple[ClientTool, ...]:
    """Declared client tools, checked: a list of `{name, description?, parameters?}` with
    distinct names (`InvalidInput` otherwise). `parameters` must be a JSON Schema object."""
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise InvalidInput("client_tools must be a list")
    if len(raw) > MAX_CLIENT_TOOLS:
        raise InvalidInput(f"at most {MAX_CLIENT_TOOLS} client tools")
    out: list[ClientTool] = []
    seen: set[str] = set()
    for item in raw:
        if not isinstance(item, Mapping):
            raise InvalidInput("each client tool must be an object")
        name = item.get("name")
        if not isinstance(name, str) or not _NAME.match(name):
            raise InvalidInput("a client tool's name must be 1-64 letters, digits, _ or -")
        if name in seen:
            raise InvalidInput(f"client tool {name!r} is declared twice")
        seen.add(name)
        description = item.get("description") or ""
        if not isinstance(description, str) or len(description) > _MAX_DESCRIPTION:
            raise InvalidInput(f"client tool {name!r}: description must be a string of at "
                               f"most {_MAX_DESCRIPTION} characters")
        params = item.get("parameters")
        if params is None:
            params = {"type": "object", "properties": {}}
        if not isinstance(params, Mapping) or params.get("type", "object") != "object":
            raise InvalidInput(f"client tool {name!r}: parameters must be a JSON Schema "
                               "object ({\"type\": \"object\", ...})")
        if _schema_size(params) > _MAX_SCHEMA_CHARS:
            raise InvalidInput(f"client tool {name!r}: parameters are too large")
        timeout = item.get("timeout")
        if timeout is not None and (isinstance(timeout, bool)
                                    or not isinstance(timeout, (int, float))
                                    or not 0 < timeout <= NO_TIMEOUT):
            raise InvalidInput(f"client tool {name!r}: timeout must be a positive number of "
                               "seconds")
        strict = item.get("strict", False)
        if not isinstance(strict, bool):
            raise InvalidInput(f"client tool {name!r}: strict must be true or false")
        out.append(ClientTool(name=name, description=description, parameters=dict(params),
                              timeout=None if timeout is None else float(timeout),
                              strict=strict))
    return tuple(out)


def tools_to_json(tools: Iterable[ClientTool]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for t in tools:
        item: dict[str, Any] = {"name": t.name, "description": t.description,
                                "parameters": t.parameters}
        if t.timeout is not None:
            item["timeout"] = t.timeout
        if t.strict:
            item["strict"] = True
        out.append(item)
    return out


def check_no_clash(client: Iterable[ClientTool], server: Iterable[str]) -> None:
    """A client tool may not share a name with one of the agent's tools."""
    clash = sorted({t.name for t in client} & set(server))
    if clash:
        raise InvalidInput(f"client tool {clash[0]!r} has the name of one of the agent's "
                           "tools")


def parse_result(output: Any, error: Any, *, has_output: bool) -> dict[str, Any]:
    """A client's result as stored: `{"output": …}` or `{"error": {"message": …}}`."""
    if has_output == (error is not None):
        raise InvalidInput("give exactly one of output and error")
    if has_output:
        return {"output": output}
    if isinstance(error, str):
        error = {"message": error}
    if not isinstance(error, Mapping) or not isinstance(error.get("message"), str):
        raise InvalidInput("error must be a string or an object with a message")
    return {"error": {"message": str(error["message"])[:4000]}}


def client_error(reason: str | None) -> dict[str, Any]:
    """The error a client tool call that got no result reports to the model."""
    if reason == "expired":
        text = "the client did not return this tool call's result in time (timed out)"
    elif reason == "cancelled":
        text = ("this tool call got no result: the session was cancelled while it waited "
                "for its client")
    else:
        text = f"this client tool call got no result: {reason or 'unknown'}"
    return {"message": text, "retryable": False, "value": {"client_tool": True,
                                                           "reason": reason}}
