"""What `useChat` posts, and the one thing outlive reads from it: the new user input.

The AI SDK sends the whole conversation with every request. outlive keeps the conversation
itself, so only the last message counts: a user message's text parts, or, when the person
answered a pending question through its `ask_user` tool part (`addToolOutput`), that output,
or the outputs the page gave the run's client tool calls (`client_outputs`: the assistant
message's tool parts that the server did not execute, at `output-available` or
`output-error`). `client_tools` in the body (the transport's `body`) are the page's own
tools, `/v1`'s shape (docs/client-tools.md).
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ...domain.client_tools import ClientTool, parse_client_tools
from .._errors import ApiError
from .._path_ids import refuse_unstorable
from ._projection import ASK_TOOL

__all__ = ["ChatRequest", "client_outputs", "declared_tools", "new_input"]


class ChatRequest(BaseModel):
    """The body of `DefaultChatTransport`'s POST (extra fields of `body` are allowed)."""

    model_config = ConfigDict(extra="allow")

    id: str = Field(min_length=1, max_length=200)
    messages: list[dict[str, Any]] = Field(default_factory=list)
    message: dict[str, Any] | None = None
    """Only the last message, for clients that send just that."""
    trigger: str = "submit-message"
    messageId: str | None = None
    agent: str | None = None
    """The outlive agent for a new conversation (the default agent when absent)."""
    client_tools: list[Any] | None = None
    """The page's client tools (`[{name, description, parameters}]`) for the runs from this
    message on; absent: the session's stay as they are."""


def _invalid(message: str) -> ApiError:
    return ApiError(400, "INVALID_INPUT", message)


def parse_chat(body: dict[str, Any]) -> ChatRequest:
    """The chat request a body is, or a 400 naming the first field that is wrong."""
    try:
        return ChatRequest.model_validate(body)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first.get("loc", ()))
        raise _invalid(f"not a chat request: {where}: {first['msg']}") from None


def _text_parts(message: dict[str, Any]) -> str:
    parts = message.get("parts")
    if isinstance(parts, list):
        return "".join(p.get("text", "") for p in parts
                       if isinstance(p, dict) and p.get("type") == "text"
                       and isinstance(p.get("text"), str))
    content = message.get("content")
    return content if isinstance(content, str) else ""


def _answer(message: dict[str, Any]) -> str:
    """The output the person gave a pending question's tool part, if any."""
    for part in reversed(message.get("parts") or []):
        if (isinstance(part, dict) and part.get("type") == "dynamic-tool"
                and part.get("toolName") == ASK_TOOL and part.get("state") == "output-available"):
            output = part.get("output")
            if isinstance(output, dict) and isinstance(output.get("answer"), str):
                return str(output["answer"])
            return output if isinstance(output, str) else json.dumps(output)
    return ""


def declared_tools(body: ChatRequest) -> tuple[ClientTool, ...] | None:
    """The page's client tools, checked (400 for a bad one); None when not given."""
    if body.client_tools is None:
        return None
    refuse_unstorable(body.client_tools, "client_tools")
    return parse_client_tools(body.client_tools)


def _tool_name(part: dict[str, Any]) -> str | None:
    kind = part.get("type")
    if not isinstance(kind, str):
        return None
    if kind == "dynamic-tool":
        name = part.get("toolName")
        return name if isinstance(name, str) else None
    return kind[len("tool-"):] if kind.startswith("tool-") else None


def client_outputs(body: ChatRequest) -> dict[str, dict[str, Any]]:
    """The results the last message gives client tool calls (call id to `{"output"}` or
    `{"error": {"message"}}`), in order; empty when it is no such answer."""
    last = body.message if body.message is not None else (
        body.messages[-1] if body.messages else None)
    if not isinstance(last, dict) or last.get("role") != "assistant":
        return {}
    parts = last.get("parts")
    out: dict[str, dict[str, Any]] = {}
    for part in parts if isinstance(parts, list) else []:
        if not isinstance(part, dict) or part.get("providerExecuted") is True:
            continue
        name = _tool_name(part)
        state = part.get("state")
        if name is None or name == ASK_TOOL or state not in ("output-available", "output-error"):
            continue
        call_id = part.get("toolCallId")
        if not isinstance(call_id, str) or not 0 < len(call_id) <= 200:
            raise _invalid("a tool part's toolCallId must be a string of 1 to 200 characters")
        if state == "output-available":
            refuse_unstorable(part.get("output"), "a tool part's output")
            out[call_id] = {"output": part.get("output")}
        else:
            text = part.get("errorText")
            if not isinstance(text, str):
                raise _invalid("a tool part at output-error needs its errorText")
            refuse_unstorable(text, "a tool part's errorText")
            out[call_id] = {"error": {"message": text[:4000]}}
    return out


def new_input(body: ChatRequest) -> tuple[str, str | None]:
    """The text the new run starts with, and the client's id for it (its message id)."""
    last = body.message if body.message is not None else (
        body.messages[-1] if body.messages else None)
    if not isinstance(last, dict):
        raise _invalid("the request carries no message")
    role = last.get("role")
    if role == "user":
        text = _text_parts(last)
    elif role == "assistant":
        text = _answer(last)
    else:
        raise _invalid(f"the last message must be the user's, not {role!r}")
    if not text.strip():
        raise _invalid("the new message has no text")
    ident = last.get("id")
    request_id = ident if isinstance(ident, str) and 0 < len(ident) <= 200 else None
    if role == "assistant" and request_id is not None:
        request_id = f"answer:{request_id}"[:200]
    return text, request_id
