"""The MCP example (examples/mcp/) works as `make mcp-example` runs it: its agents file gives
the demo agent the example server, whose tools answer through the registry."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

from outlive.config import build_agents
from outlive.mcp import McpPool, StdioServer
from outlive.providers import ToolCall
from outlive.tools import ToolContext, ToolRegistry

REPO = Path(__file__).resolve().parents[2]


async def test_the_example_agents_file_gives_the_demo_agent_working_tools(monkeypatch):
    monkeypatch.chdir(REPO)
    demo = build_agents([str(REPO / "examples/mcp/agents.toml")], demo_speed=0).get("demo")
    [server] = demo.mcp_servers
    assert isinstance(server, StdioServer) and server.name == "example"
    assert server.args == ("examples/mcp/server.py",)
    assert "lookup" in demo.tools  # the demo agent keeps its own tools
    # `make mcp-example` runs it with .venv/bin/python; the test's interpreter is the same.
    pool = McpPool([replace(server, command=sys.executable)])
    await pool.start()
    try:
        registry = ToolRegistry(pool.tools_for(demo.mcp_servers))
        assert {"example__add", "example__countdown", "example__shout"} <= set(registry.names())
        result = await registry.run(ToolCall("c1", "example__add", {"a": 2, "b": 3}),
                                    ToolContext("s1", "c1"))
        assert result.ok and result.result["text"] == "2 + 3 = 5"
        result = await registry.run(ToolCall("c2", "example__shout", {"text": " "}),
                                    ToolContext("s1", "c2"))
        assert not result.ok and isinstance(result.error, dict)
        assert result.error["message"].endswith("there is nothing to shout")
    finally:
        await pool.close()
