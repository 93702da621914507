"""MCP server declarations, agents files, result conversion and tool naming: the pure parts of
`outlive.mcp` and `runtime.agent_file`."""

from __future__ import annotations

from pathlib import Path

import pytest
from mcp import types

from outlive.domain.errors import InvalidInput
from outlive.mcp import HttpServer, StdioServer, server_from_dict
from outlive.mcp.results import INLINE_BINARY_LIMIT, convert_result
from outlive.mcp.tool import adapt_tools, tool_name
from outlive.providers import Message, ToolSpec
from outlive.providers.demo import plan_turn
from outlive.runtime import AgentRegistry, demo_agent
from outlive.runtime.agent_file import load_agents_file
from outlive.tools import ToolFailure


def test_stdio_and_http_servers_from_tables(monkeypatch):
    s = server_from_dict({"name": "fs", "command": "npx", "args": ["-y", "srv"],
                          "env": {"A": "1"}, "allow": ["read"], "tool_timeouts": {"read": 5}})
    assert isinstance(s, StdioServer) and s.args == ("-y", "srv") and s.env == {"A": "1"}
    assert s.allows("read") and not s.allows("write")
    assert s.timeout_for("read") == 5 and s.timeout_for("other") == 30
    h = server_from_dict({"name": "web", "url": "https://x.example/mcp",
                          "headers": {"X-A": "b"}, "auth_token_env": "WEB_TOKEN",
                          "deny": ["drop"]})
    assert isinstance(h, HttpServer) and not h.allows("drop") and h.allows("get")
    monkeypatch.delenv("WEB_TOKEN", raising=False)
    with pytest.raises(InvalidInput, match=r"\$WEB_TOKEN is not set"):
        h.request_headers()
    monkeypatch.setenv("WEB_TOKEN", "t0k")
    assert h.request_headers() == {"X-A": "b", "Authorization": "Bearer t0k"}


@pytest.mark.parametrize(("table", "message"), [
    ({"name": "a", "command": "x", "url": "http://h"}, "either command"),
    ({"name": "a", "command": "x", "port": 1}, "unknown keys port"),
    ({"name": "has_underscore", "command": "x"}, "must be 1-32 letters"),
    ({"command": "x"}, "missing 'name'"),
    ({"name": "a", "url": "ftp://h"}, "needs an http"),
    ({"name": "a", "command": "x", "timeout": 0}, "timeouts must be positive"),
    ({"name": "a", "command": "x", "args": "one string"}, "list of strings"),
])
def test_bad_server_tables_say_what_is_wrong(table, message):
    with pytest.raises(InvalidInput, match=message):
        server_from_dict(table)


def test_agents_file_adds_agents_and_extends_existing_ones(tmp_path: Path):
    path = tmp_path / "agents.toml"
    path.write_text("""
[agents.files]
system_prompt = "You work with files."
max_turns = 7
[[agents.files.mcp_servers]]
name = "fs"
command = "fs-server"

[agents.plain]
system_prompt = "No tools."
demo_tools = false

[[agents.demo.mcp_servers]]
name = "remote"
url = "http://127.0.0.1:9/mcp"
""")
    registry = AgentRegistry([demo_agent(0)])
    assert load_agents_file(path, registry) == ["files", "plain", "demo"]
    files = registry.get("files")
    assert files.max_turns == 7 and [s.name for s in files.mcp_servers] == ["fs"]
    assert len(files.tools) == 0 and len(registry.get("plain").tools) == 0
    demo = registry.get("demo")
    assert [s.name for s in demo.mcp_servers] == ["remote"] and "lookup" in demo.tools
    assert {s.name for s in registry.mcp_servers()} == {"fs", "remote"}


def test_agents_file_errors(tmp_path: Path):
    path = tmp_path / "agents.toml"
    registry = AgentRegistry([demo_agent(0)])
    path.write_text("[agents.new]\nmodel = 'demo:scripted'\n")
    with pytest.raises(InvalidInput, match="needs a system_prompt"):
        load_agents_file(path, registry)
    path.write_text("[agents.new]\nsystem_prompt = 'x'\ntools = ['a']\n")
    with pytest.raises(InvalidInput, match="unknown keys tools"):
        load_agents_file(path, registry)
    path.write_text("""
[[agents.a.mcp_servers]]
name = "s"
command = "one"
[[agents.demo.mcp_servers]]
name = "s"
command = "two"
""")
    with pytest.raises(InvalidInput, match="needs a system_prompt"):
        load_agents_file(path, registry)
    path.write_text("[[agents.demo.mcp_servers]]\nname = 's'\ncommand = 'one'\n"
                    "[[agents.demo.mcp_servers]]\nname = 's'\ncommand = 'two'\n")
    with pytest.raises(InvalidInput, match="two different MCP servers are named 's'"):
        load_agents_file(path, registry)


def test_results_keep_text_content_and_structure_apart():
    big = "A" * (INLINE_BINARY_LIMIT + 4)
    result = types.CallToolResult(content=[
        types.TextContent(type="text", text="one"),
        types.TextContent(type="text", text="two"),
        types.ImageContent(type="image", mimeType="image/png", data=big),
        types.EmbeddedResource(type="resource", resource=types.TextResourceContents(
            uri="file:///a.txt", mimeType="text/plain", text="hello")),
        types.ResourceLink(type="resource_link", uri="file:///b.bin", name="b"),
    ], structuredContent={"n": 1})
    out = convert_result(result)
    assert out["text"] == "one\ntwo" and out["structured"] == {"n": 1}
    image, resource, link = out["content"]
    assert "data" not in image and image["bytes"] == len(big) * 3 // 4
    assert resource == {"type": "resource", "uri": "file:///a.txt",
                        "mime_type": "text/plain", "text": "hello"}
    assert link["uri"] == "file:///b.bin" and link["name"] == "b"
    # One copy of structured content, whichever way the server doubled it.
    twice = types.CallToolResult(content=[types.TextContent(type="text", text='{"n": 2}')],
                                 structuredContent={"n": 2})
    assert convert_result(twice) == {"structured": {"n": 2}}
    wrapped = types.CallToolResult(content=[types.TextContent(type="text", text="5")],
                                   structuredContent={"result": "5"})
    assert convert_result(wrapped) == {"text": "5"}
    failed = convert_result(types.CallToolResult(
        content=[types.TextContent(type="text", text="no such file")], isError=True))
    assert failed == ToolFailure("no such file")


def test_tool_names_are_namespaced_and_safe_for_model_apis():
    assert tool_name("fs", "read_file") == "fs__read_file"
    assert tool_name("fs", "files.read v2") == "fs__files_read_v2"
    assert len(tool_name("s", "x" * 100)) == 64


def test_the_demo_model_calls_any_offered_tool_by_name_when_calls_are_on():
    tools = [ToolSpec("fs__read", "Read.", {"type": "object"})]
    turn = plan_turn([Message("user", 'call fs__read {"path": "a"}')], tools, calls="all")
    assert turn.stop_reason == "tool_calls"
    assert [(c.name, c.arguments) for c in turn.tool_calls] == [("fs__read", {"path": "a"})]
    assert "no tool `nope`" in plan_turn([Message("user", "call nope {}")], tools,
                                         calls="all").text
    assert "not JSON" in plan_turn([Message("user", "call fs__read {oops")], tools,
                                   calls="all").text


def test_the_demo_model_calls_no_mcp_tool_by_name_unless_calls_are_on():
    """Off (the default) and for the demo agent's own scope, an MCP tool is not called:
    the answer says how to turn calls on."""
    tools = [ToolSpec("fs__read", "Read.", {"type": "object"}),
             ToolSpec("lookup", "Look up.", {"type": "object"})]
    for scope in ("none", "demo"):
        turn = plan_turn([Message("user", 'call fs__read {"path": "a"}')], tools, calls=scope)
        assert turn.stop_reason == "stop" and not turn.tool_calls
        assert "--demo-calls" in turn.text and "OUTLIVE_DEMO_CALLS=1" in turn.text
    own = plan_turn([Message("user", 'call lookup {"query": "x"}')], tools, calls="demo")
    assert [c.name for c in own.tool_calls] == ["lookup"]
    assert not plan_turn([Message("user", 'call lookup {"query": "x"}')], tools).tool_calls


def test_a_schema_that_cannot_be_checked_here_leaves_checking_to_the_server():
    conn = _Listed([types.Tool(name="fetch", inputSchema={
        "type": "object", "properties": {"x": {"$ref": "https://example.com/x.json"}}})])
    [t] = adapt_tools(conn)
    assert callable(t.bind({"x": 1}))  # no network, no crash


class _Listed:
    """Just enough of a connection for `adapt_tools`: a server declaration and its tools."""

    def __init__(self, tools: list[types.Tool]) -> None:
        self.server = server_from_dict({"name": "s", "command": "x"})
        self.tools = tools


def test_require_approval_gates_calls_by_the_tools_hints() -> None:
    never = server_from_dict({"name": "fs", "command": "x"})
    assert not never.approval_for(True, True)
    declared = server_from_dict({"name": "fs", "command": "x", "require_approval": "destructive"})
    assert declared.approval_for(True, True) and not declared.approval_for(True, False)
    maybe = server_from_dict({"name": "fs", "url": "http://h/mcp",
                              "require_approval": "maybe_destructive"})
    assert maybe.approval_for(True, False) and not maybe.approval_for(False, False)
    always = server_from_dict({"name": "fs", "command": "x", "require_approval": "always"})
    assert always.approval_for(False, False)
    with pytest.raises(InvalidInput):
        server_from_dict({"name": "fs", "command": "x", "require_approval": "sometimes"})
