"""The MCP servers of one worker: one connection per server, whatever number of agents and
runs use it, started with the worker and closed with it.

The SDK is imported only when a server is declared, so a deployment without MCP servers does
not need the `mcp` extra.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from ..domain.errors import InvalidInput
from ..tools import ToolDefinition
from .config import McpServer

if TYPE_CHECKING:
    from .connection import ServerConnection

__all__ = ["McpPool", "McpUnavailable", "unique_servers"]


class McpUnavailable(Exception):
    """A server an agent uses has not started; the message names it and says why."""


def unique_servers(servers: Iterable[McpServer]) -> list[McpServer]:
    """Each server once; two different declarations under one name are a configuration
    error, since tools are named after the server."""
    by_name: dict[str, McpServer] = {}
    for s in servers:
        seen = by_name.setdefault(s.name, s)
        if seen != s:
            raise InvalidInput(f"two different MCP servers are named {s.name!r}")
    return list(by_name.values())


class McpPool:
    def __init__(self, servers: Iterable[McpServer] = ()) -> None:
        self.servers = unique_servers(servers)
        self._connections: dict[str, ServerConnection] = {}
        self._adapted: dict[str, tuple[object, list[ToolDefinition]]] = {}
        """Per server: the tool list last adapted, and the result (a claim reuses it)."""

    def __bool__(self) -> bool:
        return bool(self.servers)

    async def start(self) -> None:
        """Connect to every server at once; returns when each is connected or has failed
        (a failed one keeps retrying with backoff)."""
        if not self.servers:
            return
        try:
            from .connection import ServerConnection
        except ImportError as exc:
            raise InvalidInput(
                f"MCP servers need the mcp extra (pip install 'outlive[mcp]'): {exc}"
            ) from exc
        for s in self.servers:
            conn = ServerConnection(s)
            self._connections[s.name] = conn
            conn.start()
        await asyncio.gather(*(c.wait_started() for c in self._connections.values()))

    async def close(self) -> None:
        await asyncio.gather(*(c.close() for c in self._connections.values()),
                             return_exceptions=True)

    def connection(self, name: str) -> ServerConnection:
        return self._connections[name]

    def tools_for(self, servers: Sequence[McpServer]) -> list[ToolDefinition]:
        """The tools of `servers`, as the registry runs them. Raises `McpUnavailable` for a
        server that never came up, so the session fails with the reason instead of running
        without tools it was promised."""
        from .tool import adapt_tools

        tools: list[ToolDefinition] = []
        for s in servers:
            conn = self._connections.get(s.name)
            if conn is None:
                raise McpUnavailable(f"MCP server {s.name!r} is not started on this worker")
            if not conn.ever_ready:
                raise McpUnavailable(conn.failure or f"MCP server {s.name!r} is still starting")
            listed, adapted = self._adapted.get(s.name, (None, []))
            if listed is not conn.tools:
                adapted = list(adapt_tools(conn))
                self._adapted[s.name] = (conn.tools, adapted)
            tools.extend(adapted)
        return tools
