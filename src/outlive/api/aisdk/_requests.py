"""What `useChat` posts, and the one thing outlive reads from it: the new user input.

The AI SDK sends the whole conversation with every request. outlive keeps the conversation
itself, so only the last message counts: a user message's text parts, or, when the person
answered a pending question through its `ask_user` tool part (`addToolOutput`), that output.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from .._errors import ApiError
from ._projection import ASK_TOOL

__all__ = ["ChatRequest", "new_input"]


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


def new_input(body: ChatRequest) -> tuple[str, str | None]:
    """The text the new run starts with, and the client's id for it (its message id)."""
    if body.trigger == "regenerate-message":
        raise _invalid("outlive keeps one linear history per chat and cannot regenerate an "
                       "answer; send a new message instead")
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
