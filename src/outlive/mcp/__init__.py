"""Tools from MCP servers: declared per agent (stdio or streamable HTTP), reached through one
client session per server per worker, and run by the tool registry like Python tools."""

from .config import HttpServer, McpServer, StdioServer, server_from_dict
from .pool import McpPool, McpUnavailable, unique_servers

__all__ = [
    "HttpServer",
    "McpPool",
    "McpServer",
    "McpUnavailable",
    "StdioServer",
    "server_from_dict",
    "unique_servers",
]
