"""The JSON shapes of OpenAI's Responses API that the projection fills in.

Checked against the official SDK's own models (tests/openai_api/test_projection.py validates
every event and Response with them). Fields outlive has no counterpart for carry OpenAI's
defaults: plain `text`, `store: true`, and `null` for what is not recorded (`background`,
`instructions`, `temperature`, …). `tools` and `tool_choice` are the conversation's function
tools and choice as they are now (a later request may have changed them).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = [
    "content_part",
    "failure",
    "json_text",
    "plain",
    "response_object",
    "text_of",
    "usage_object",
    "whole_number",
]


def response_object(
    *,
    id: str,
    model: str,
    metadata: Mapping[str, str],
    previous_response_id: str | None,
    status: str,
    created_at: int,
    completed_at: int | None,
    error: Mapping[str, Any] | None,
    incomplete_reason: str | None,
    usage: tuple[int, int] | None,
    output: Sequence[dict[str, Any]],
    truncation: str = "auto",
    tools: Sequence[Mapping[str, Any]] = (),
    tool_choice: str | Mapping[str, str] = "auto",
) -> dict[str, Any]:
    return {
        "id": id,
        "object": "response",
        "created_at": created_at,
        "completed_at": completed_at,
        "status": status,
        "background": None,
        "error": dict(error) if status == "failed" and error else None,
        "incomplete_details": {"reason": incomplete_reason} if status == "incomplete" else None,
        "instructions": None,
        "max_output_tokens": None,
        "metadata": dict(metadata),
        "model": model,
        "output": list(output),
        "parallel_tool_calls": True,
        "previous_response_id": previous_response_id,
        "reasoning": None,
        "store": True,
        "temperature": None,
        "text": {"format": {"type": "text"}},
        "tool_choice": tool_choice if isinstance(tool_choice, str) else dict(tool_choice),
        "tools": [dict(t) for t in tools],
        "top_p": None,
        "truncation": truncation,
        "usage": None if usage is None else usage_object(*usage),
        "user": None,
    }


def usage_object(input_tokens: int, output_tokens: int) -> dict[str, Any]:
    return {
        "input_tokens": input_tokens,
        "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
        "output_tokens": output_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": input_tokens + output_tokens,
    }


def content_part(kind: str, text: str) -> dict[str, Any]:
    """The one content part of a `message` (output_text) or `reasoning` item."""
    if kind == "message":
        return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}
    return {"type": "reasoning_text", "text": text}


def failure(code: Any, message: Any) -> dict[str, Any]:
    """A Response's `error`: OpenAI's codes are a closed list, so ours goes in `type`."""
    return {"code": "server_error", "message": text_of(message), "type": text_of(code) or None,
            "param": None}


def text_of(value: Any) -> str:
    if isinstance(value, str):
        return value
    return "" if value is None else str(value)


def whole_number(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def plain(value: Any) -> Any:
    """A payload as JSON gives it back (it was stored as JSON, so this only copies)."""
    return json.loads(json.dumps(value, default=str))


def json_text(value: Any) -> str:
    """Tool arguments and output as OpenAI carries them: a string (JSON unless it is one)."""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)
