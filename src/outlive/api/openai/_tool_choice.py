"""`tool_choice` on the Responses surface, and the function tools a Response echoes
(docs/client-tools.md#tool-choice).

OpenAI's choices map onto the session's: `auto`, `none`, `required`, and `{"type":
"function", "name": …}` forcing one of the request's function tools (or one of the agent's
own). The choice holds for the model's answer to the request's message: the calls after a
forced call's results decide for themselves (a `required` on every call would never end).
Choices for hosted tools, `allowed_tools` and custom tools are refused with a 400.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ...domain.client_tools import ClientTool
from ...domain.errors import InvalidInput
from ...domain.tool_calls import ToolChoice, parse_tool_choice
from ._errors import bad_request

__all__ = ["check_tool_choice", "function_tool_json", "request_tool_choice",
           "response_tool_choice"]

PARAM = "tool_choice"


def check_tool_choice(raw: Any) -> None:
    """Refuse a choice outlive has no counterpart for, before anything is stored."""
    if raw is None or raw in ("auto", "none", "required"):
        return
    if isinstance(raw, Mapping) and raw.get("type") == "function":
        if not isinstance(raw.get("name"), str) or set(raw) - {"type", "name"}:
            raise bad_request("A function tool_choice is {\"type\": \"function\", \"name\": "
                              "NAME}.", PARAM, "invalid_value")
        return
    kind = raw.get("type") if isinstance(raw, Mapping) else raw
    raise bad_request(f"tool_choice {str(kind)[:64]!r} is not supported: use 'auto', 'none', "
                      "'required' or {\"type\": \"function\", \"name\": NAME}.", PARAM,
                      "unsupported_parameter")


def request_tool_choice(raw: Any, tools: Iterable[ClientTool],
                        agent_tools: Iterable[str]) -> ToolChoice:
    """The session's choice for a request (checked by `check_tool_choice`): absent is
    `auto`, as OpenAI's default; a forced function must be one the model is offered, and
    `required` needs a tool to call."""
    offered = [*agent_tools, *(t.name for t in tools)]
    if raw == "required" and not offered:
        raise bad_request("tool_choice 'required' needs a tool: declare a function tool.",
                          PARAM, "invalid_value")
    try:
        return parse_tool_choice("auto" if raw is None else raw, offered)
    except InvalidInput as exc:
        raise bad_request(exc.message, PARAM, "invalid_value") from None


def response_tool_choice(choice: ToolChoice | None) -> str | dict[str, str]:
    if choice is None:
        return "auto"
    if choice.mode == "tool":
        return {"type": "function", "name": choice.name or ""}
    return choice.mode


def function_tool_json(tool: ClientTool) -> Mapping[str, Any]:
    """A client tool as the `function` tool of a Response's `tools`."""
    return {"type": "function", "name": tool.name, "description": tool.description or None,
            "parameters": tool.parameters, "strict": tool.strict}
