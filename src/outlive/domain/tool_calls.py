"""The tool-call vocabulary shared by models and tools: what a model is told about a tool
(`ToolSpec`) and what it asks for (`ToolCall`).

It lives in the domain because both sides speak it: providers translate it to and from their
SDKs, the tool registry describes and runs tools in it, and neither needs the other.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["ToolCall", "ToolSpec"]


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
