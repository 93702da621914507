"""An MCP server's tool as an outlive tool definition.

The registry runs it like a Python tool (timeout, cancel, progress, idempotency key); what
differs is only how arguments are checked (against the server's JSON schema, passed to the
model as-is) and how the call is made (over the worker's shared client session).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

import jsonschema
from jsonschema.exceptions import SchemaError
from mcp import types

from ..domain.tool_calls import ToolSpec
from ..tools import InvalidArguments, ToolContext, ToolFailure
from .connection import ServerConnection, ServerUnavailable
from .results import convert_result

__all__ = ["SEPARATOR", "McpTool", "adapt_tools"]

log = logging.getLogger("outlive.mcp")

SEPARATOR = "__"
"""Between the server's name and the tool's: `files__read_file`."""

_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")


@dataclass(frozen=True, eq=False)
class McpTool:
    """One tool of one server, bound to the worker's connection to that server."""

    name: str
    remote_name: str
    description: str
    schema: dict[str, Any]
    connection: ServerConnection
    timeout: float
    idempotent: bool
    destructive: bool
    validator: Any = field(repr=False)
    approval: bool = False
    """The server's `require_approval` holds for this tool: every call waits for a person."""

    def needs_approval(self, arguments: dict[str, Any], ctx: ToolContext) -> bool:
        return self.approval

    def spec(self) -> ToolSpec:
        return ToolSpec(self.name, self.description, self.schema)

    def bind(self, arguments: dict[str, Any]) -> Callable[[ToolContext], Coroutine[Any, Any, Any]]:
        try:
            problems = sorted(self.validator.iter_errors(arguments), key=lambda e: list(e.path))
        except Exception as exc:  # e.g. a `$ref` we do not fetch: the server still checks
            log.info("tool %s: arguments not checked here (%s)", self.name, exc)
            problems = []
        if problems:
            raise InvalidArguments(
                f"invalid arguments for tool {self.name!r}: "
                + "; ".join(_describe(p) for p in problems[:5])
            )

        def call(ctx: ToolContext) -> Coroutine[Any, Any, Any]:
            return self._call(arguments, ctx)

        return call

    async def _call(self, arguments: dict[str, Any], ctx: ToolContext
                    ) -> dict[str, Any] | ToolFailure:
        async def report(progress: float, total: float | None, message: str | None) -> None:
            if message:
                await ctx.progress(message)
            elif total:
                await ctx.progress(f"{progress:g} of {total:g}")
            else:
                await ctx.progress(f"{progress:g}")

        try:
            result = await self.connection.call(self.remote_name, arguments,
                                                key=ctx.idempotency_key, progress=report)
        except ServerUnavailable as exc:  # it restarts with backoff: a retry may work
            return ToolFailure(str(exc), retryable=True)
        return convert_result(result)


def _describe(error: jsonschema.ValidationError) -> str:
    where = ".".join(str(p) for p in error.path) or "arguments"
    return f"{where}: {error.message}"


def tool_name(server: str, remote: str) -> str:
    """`server__tool`, with characters the model APIs refuse replaced and cut to 64."""
    return _UNSAFE.sub("_", f"{server}{SEPARATOR}{remote}")[:64]


def adapt_tools(connection: ServerConnection) -> list[McpTool]:
    """The connection's current tools that its server declaration allows."""
    server = connection.server
    adapted: list[McpTool] = []
    for t in connection.tools:
        if not server.allows(t.name):
            continue
        schema = dict(t.inputSchema)
        try:
            cls = jsonschema.validators.validator_for(schema)
            cls.check_schema(schema)
        except SchemaError as exc:
            log.warning("MCP server %s: tool %s has an invalid schema (%s); left out",
                        server.name, t.name, exc.message)
            continue
        hints = t.annotations or types.ToolAnnotations()
        destructive = hints.readOnlyHint is not True and hints.destructiveHint is not False
        adapted.append(McpTool(
            name=tool_name(server.name, t.name),
            remote_name=t.name,
            description=t.description or t.title or t.name,
            schema=schema,
            connection=connection,
            timeout=server.timeout_for(t.name),
            idempotent=hints.idempotentHint is True,
            # The protocol's default: a tool not marked read-only may be destructive.
            destructive=destructive,
            validator=cls(schema),
            approval=server.approval_for(destructive, hints.destructiveHint is True),
        ))
    return adapted
