"""Agents declared in a TOML file, so a user can give an agent MCP servers without writing
Python (`outlive worker --agents agents.toml`).

```toml
[agents.files]                       # a new agent
system_prompt = "You work with files."
model = "demo:scripted"
demo_tools = true                    # also the demo agent's own tools
# context_window = 8192               # tokens; compaction settings (docs/context.md)
# compact_at = 0.8                    # compact past this share of the window
# summarizer = "openai:gpt-4o-mini"   # the route that writes summaries
# subagents = ["researcher"]          # agents it may delegate to (docs/subagents.md)
# max_depth = 3                       # how deep its tree of children may go
# max_children = 16                   # children per session

[[agents.files.mcp_servers]]
name = "fs"
command = "npx"
args = ["-y", "@modelcontextprotocol/server-filesystem", "/srv/data"]

[[agents.demo.mcp_servers]]          # an agent that exists already gains a server
name = "remote"
url = "https://tools.example.com/mcp"
auth_token_env = "REMOTE_TOKEN"
```
"""

from __future__ import annotations

import tomllib
from dataclasses import replace
from pathlib import Path
from typing import Any

from ..domain.budget import parse_budget
from ..domain.errors import InvalidInput
from ..mcp import server_from_dict
from ..tools import ToolRegistry, demo_tools
from .agents import Agent, AgentRegistry

__all__ = ["load_agents_file"]

_CONTEXT_KEYS = ("context_window", "output_reserve", "compact_at", "summarizer")
_KEYS = {"system_prompt", "model", "max_turns", "max_tokens", "temperature", "demo_tools",
         "mcp_servers", "extra", "budget", "subagents", "max_depth", "max_children",
         *_CONTEXT_KEYS}


def load_agents_file(path: str | Path, registry: AgentRegistry, *,
                     demo_speed: float = 1.0) -> list[str]:
    """Add or extend the file's agents in `registry`; returns their names."""
    try:
        data = tomllib.loads(Path(path).read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise InvalidInput(f"cannot read agents file {str(path)!r}: {exc}") from exc
    agents = data.get("agents")
    if not isinstance(agents, dict) or not agents:
        raise InvalidInput(f"agents file {str(path)!r} has no [agents.<name>] table")
    names = []
    for name, table in agents.items():
        if not isinstance(table, dict):
            raise InvalidInput(f"{path}: agents.{name} must be a table")
        registry.add(_agent(str(name), table, registry, demo_speed, f"{path}: agents.{name}"))
        names.append(str(name))
    return names


def _agent(name: str, table: dict[str, Any], registry: AgentRegistry, demo_speed: float,
           where: str) -> Agent:
    unknown = sorted(set(table) - _KEYS)
    if unknown:
        raise InvalidInput(f"{where}: unknown keys {', '.join(unknown)}; "
                           f"known: {', '.join(sorted(_KEYS))}")
    servers_data = table.get("mcp_servers", [])
    if not isinstance(servers_data, list):
        raise InvalidInput(f"{where}: mcp_servers must be an array of tables "
                           f"([[agents.{name}.mcp_servers]])")
    servers = [server_from_dict(s, f"{where}.mcp_servers[{i}]")
               for i, s in enumerate(servers_data)]
    fields: dict[str, Any] = {k: table[k] for k in
                              ("system_prompt", "model", "max_turns", "max_tokens",
                               "temperature", "extra", "subagents", "max_depth", "max_children",
                               *_CONTEXT_KEYS) if k in table}
    _check_context(fields, where)
    _check_subagents(fields, where)
    if "budget" in table:
        try:
            fields["budget"] = parse_budget(table["budget"])
        except InvalidInput as exc:
            raise InvalidInput(f"{where}: {exc}") from exc
    if name in registry:
        base = registry.get(name)
        tools = base.tools
        if table.get("demo_tools"):
            tools = ToolRegistry([*base.tools, *(t for t in demo_tools(demo_speed)
                                                 if t.name not in base.tools)])
        return replace(base, **fields, tools=tools,
                       mcp_servers=[*base.mcp_servers, *servers])
    if "system_prompt" not in fields:
        raise InvalidInput(f"{where}: a new agent needs a system_prompt")
    tools = demo_tools(demo_speed) if table.get("demo_tools") else ToolRegistry()
    try:
        return Agent(name=name, tools=tools, mcp_servers=servers, **fields)
    except TypeError as exc:
        raise InvalidInput(f"{where}: {exc}") from exc


def _check_subagents(fields: dict[str, Any], where: str) -> None:
    """`subagents` is a list of agent names; the limits are whole numbers, 1 or more."""
    names = fields.get("subagents")
    if names is not None and (not isinstance(names, list)
                              or not all(isinstance(n, str) and n for n in names)):
        raise InvalidInput(f"{where}: subagents must be a list of agent names")
    for key in ("max_depth", "max_children"):
        value = fields.get(key)
        if value is not None and (not isinstance(value, int) or isinstance(value, bool)
                                  or value < 1):
            raise InvalidInput(f"{where}: {key} must be a whole number, 1 or more")


def _check_context(fields: dict[str, Any], where: str) -> None:
    """The context settings' types, refused here rather than in a worker's run."""
    for key in ("context_window", "output_reserve"):
        value = fields.get(key)
        if value is not None and (not isinstance(value, int) or isinstance(value, bool)
                                  or value < (256 if key == "context_window" else 0)):
            raise InvalidInput(f"{where}: {key} must be a whole number of tokens "
                               f"({'at least 256' if key == 'context_window' else '0 or more'})")
    share = fields.get("compact_at")
    if share is not None and (not isinstance(share, (int, float)) or isinstance(share, bool)
                              or not 0.1 <= share <= 1.0):
        raise InvalidInput(f"{where}: compact_at must be a share of the window, 0.1 to 1.0")
    route = fields.get("summarizer")
    if route is not None and (not isinstance(route, str) or ":" not in route):
        raise InvalidInput(f"{where}: summarizer must be a model route like 'openai:gpt-4o-mini'")
