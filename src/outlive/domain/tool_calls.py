"""The tool-call vocabulary shared by models and tools: what a model is told about a tool
(`ToolSpec`) and what it asks for (`ToolCall`).

It lives in the domain because both sides speak it: providers translate it to and from their
SDKs, the tool registry describes and runs tools in it, and neither needs the other.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from .errors import InvalidInput

__all__ = ["ToolCall", "ToolChoice", "ToolSpec", "parse_tool_choice"]


@dataclass(frozen=True)
class ToolCall:
    """A complete tool call as the model asked for it; `call_id` is unique within a session."""

    call_id: str
    name: str
    arguments: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ToolSpec:
    """What the model is told about a tool: `parameters` is a JSON schema of its arguments."""

    name: str
    description: str
    parameters: dict[str, Any] = field(default_factory=lambda: {"type": "object", "properties": {}})
    strict: bool = False
    """Ask the model for arguments that match `parameters` exactly (OpenAI's strict mode;
    providers without it ignore it)."""
    client: bool = False
    """A client tool (docs/client-tools.md): its calls are run by the session's client, not
    by the server (providers describe it to the model like any other)."""


@dataclass(frozen=True)
class ToolChoice:
    """What the model must do with its tools on a call: `auto` (it decides), `required`
    (call at least one), `tool` (call the one named) or `none` (call none)."""

    mode: Literal["auto", "required", "tool", "none"]
    name: str | None = None

    def to_json(self) -> str | dict[str, str]:
        return {"name": self.name or ""} if self.mode == "tool" else self.mode


def parse_tool_choice(raw: Any, offered: Sequence[str] | None = None) -> ToolChoice:
    """`"auto"`, `"required"`, `"none"` or `{"name": tool}` (a tool of `offered` when that
    is known); `InvalidInput` otherwise."""
    if raw in ("auto", "required", "none"):
        return ToolChoice(raw)
    if isinstance(raw, dict) and set(raw) <= {"name", "type"} and isinstance(
            raw.get("name"), str) and raw.get("type") in (None, "tool", "function"):
        name = str(raw["name"])
        if offered is not None and name not in offered:
            raise InvalidInput(f"tool_choice names {name!r}, which is not one of the tools "
                               "the model is offered")
        return ToolChoice("tool", name)
    raise InvalidInput('tool_choice must be "auto", "required", "none" or {"name": TOOL}')
