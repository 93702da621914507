"""How an agent declares the MCP servers whose tools it may call: a local command spoken to
over stdio, or a streamable HTTP endpoint. Declarations are plain frozen data so the same
server named by several agents is recognised as one, and so they can come from Python or
from the agents TOML file alike."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..domain.errors import InvalidInput

__all__ = ["HttpServer", "McpServer", "StdioServer", "server_from_dict"]

_NAME = re.compile(r"^[A-Za-z0-9-]{1,32}$")
"""No underscores: tools are namespaced `server__tool`, and the split must be unambiguous."""


@dataclass(frozen=True)
class _Common:
    name: str
    allow: tuple[str, ...] = ()
    """Only these tools (by their name on the server); empty means all of them."""
    deny: tuple[str, ...] = ()
    """Never these tools, even when `allow` names them."""
    timeout: float = 30.0
    """Seconds a call may take, unless `tool_timeouts` names the tool."""
    tool_timeouts: Mapping[str, float] = field(default_factory=dict)
    start_timeout: float = 20.0
    """Seconds to connect and list the tools before the server counts as failed."""
    require_approval: str = "never"
    """Which calls wait for a person's approval (docs/approvals.md): `never`, `destructive`
    (tools that declare `destructiveHint: true`), `maybe_destructive` (also tools that are
    not declared read-only, the protocol's default) or `always`."""

    def check(self) -> None:
        if not _NAME.match(self.name):
            raise InvalidInput(
                f"MCP server name {self.name!r} must be 1-32 letters, digits or '-' "
                "(tools are named <server>__<tool>)"
            )
        for t in [self.timeout, self.start_timeout, *self.tool_timeouts.values()]:
            if not t > 0:
                raise InvalidInput(f"MCP server {self.name!r}: timeouts must be positive")
        if self.require_approval not in _APPROVAL:
            raise InvalidInput(f"MCP server {self.name!r}: require_approval must be one of "
                               f"{', '.join(_APPROVAL)}")

    def approval_for(self, maybe_destructive: bool, declared_destructive: bool) -> bool:
        """Whether calls of a tool with these hints wait for a person."""
        return {"never": False, "always": True, "destructive": declared_destructive,
                "maybe_destructive": maybe_destructive}[self.require_approval]

    def allows(self, tool: str) -> bool:
        return (not self.allow or tool in self.allow) and tool not in self.deny

    def timeout_for(self, tool: str) -> float:
        return float(self.tool_timeouts.get(tool, self.timeout))


@dataclass(frozen=True)
class StdioServer(_Common):
    """A server this worker starts as a child process and speaks to over stdin/stdout. It
    lives as long as the worker: stopped with it, and killed by the kernel if the worker is
    killed."""

    command: str = ""
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    """Added to a minimal environment (PATH, HOME, ...), not to the worker's own."""
    cwd: str | None = None

    def __post_init__(self) -> None:
        self.check()
        if not self.command:
            raise InvalidInput(f"MCP server {self.name!r} needs a command")


@dataclass(frozen=True)
class HttpServer(_Common):
    """A server reached over streamable HTTP at `url`."""

    url: str = ""
    headers: Mapping[str, str] = field(default_factory=dict)
    auth_token_env: str | None = None
    """The name of an environment variable holding a token sent as `Authorization: Bearer`;
    read when connecting, so the secret never sits in the configuration."""

    def __post_init__(self) -> None:
        self.check()
        if not self.url.startswith(("http://", "https://")):
            raise InvalidInput(f"MCP server {self.name!r} needs an http(s) url")

    def request_headers(self) -> dict[str, str]:
        headers = dict(self.headers)
        if self.auth_token_env:
            token = os.environ.get(self.auth_token_env)
            if not token:
                raise InvalidInput(
                    f"MCP server {self.name!r}: ${self.auth_token_env} is not set"
                )
            headers["Authorization"] = f"Bearer {token}"
        return headers


McpServer = StdioServer | HttpServer

_APPROVAL = ("never", "destructive", "maybe_destructive", "always")
_COMMON = {"name", "allow", "deny", "timeout", "tool_timeouts", "start_timeout",
           "require_approval"}
_STDIO = _COMMON | {"command", "args", "env", "cwd"}
_HTTP = _COMMON | {"url", "headers", "auth_token_env"}


def server_from_dict(data: Mapping[str, Any], where: str = "mcp_servers") -> McpServer:
    """One server from a TOML table: `command` makes it stdio, `url` streamable HTTP."""
    if "command" in data and "url" in data:
        raise InvalidInput(f"{where}: give either command (stdio) or url (HTTP), not both")
    http = "url" in data
    known = _HTTP if http else _STDIO
    unknown = sorted(set(data) - known)
    if unknown:
        raise InvalidInput(f"{where}: unknown keys {', '.join(unknown)}; "
                           f"known: {', '.join(sorted(known))}")
    try:
        common: dict[str, Any] = {
            "name": str(data["name"]),
            "allow": _strings(data.get("allow", ())),
            "deny": _strings(data.get("deny", ())),
            "timeout": float(data.get("timeout", 30.0)),
            "tool_timeouts": {str(k): float(v)
                              for k, v in dict(data.get("tool_timeouts", {})).items()},
            "start_timeout": float(data.get("start_timeout", 20.0)),
            "require_approval": str(data.get("require_approval", "never")),
        }
        if http:
            return HttpServer(
                **common, url=str(data["url"]),
                headers={str(k): str(v) for k, v in dict(data.get("headers", {})).items()},
                auth_token_env=data.get("auth_token_env"),
            )
        return StdioServer(
            **common, command=str(data.get("command", "")), args=_strings(data.get("args", ())),
            env={str(k): str(v) for k, v in dict(data.get("env", {})).items()},
            cwd=data.get("cwd"),
        )
    except KeyError as exc:
        raise InvalidInput(f"{where}: missing {exc.args[0]!r}") from None
    except (TypeError, ValueError) as exc:
        raise InvalidInput(f"{where}: {exc}") from None


def _strings(value: Any) -> tuple[str, ...]:
    if isinstance(value, str) or not isinstance(value, Sequence):
        raise TypeError(f"expected a list of strings, got {value!r}")
    return tuple(str(v) for v in value)
