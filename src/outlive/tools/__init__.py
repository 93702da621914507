"""Typed tools (pydantic arguments, timeout, cancel signal, progress, idempotency key), the
registry that runs them, and the demo agent's tools."""

from ._cancel import CancelEvent
from ._registry import (
    InvalidArguments,
    Tool,
    ToolContext,
    ToolDefinition,
    ToolFailure,
    ToolFunction,
    ToolRegistry,
    ToolResult,
    tool,
)
from .demo import demo_tools

__all__ = [
    "CancelEvent",
    "InvalidArguments",
    "Tool",
    "ToolContext",
    "ToolDefinition",
    "ToolFailure",
    "ToolFunction",
    "ToolRegistry",
    "ToolResult",
    "demo_tools",
    "tool",
]
