"""MCP tools run by a real in-process worker against real MCP servers (stdio and streamable
HTTP, tests/mcp/server.py): discovery and filtering, the idempotency key, argument
validation, progress, error results, content, cancel, a server that dies and one that never
starts."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from outlive.domain import Status
from outlive.mcp import HttpServer, McpPool, McpUnavailable, StdioServer
from outlive.store import SqliteStore
from tests.support.mcp_servers import McpWorkers, calls, mcp_agent, stdio_server
from tests.support.processes import free_port
from tests.support.sessions import all_events, settled
from tests.support.waiting import eventually


def by_type(events, type_):
    return [e for e in events if e.type == type_]


async def ask(store: SqliteStore, owner: str, prompt: str, agent: str = "mcp"):
    """Run one `call <tool> {json}` session to its end; returns (session, events)."""
    s = await store.create_session(owner, agent=agent, model="demo:scripted", prompt=prompt)
    done = await settled(store, s.id)
    return done, await all_events(store, s.id)


async def test_calls_over_stdio_and_http(http_server: HttpServer, sqlite_store: SqliteStore,
                                         mcp_workers: McpWorkers, owner: str, record: Path):
    local = stdio_server(record, deny=("die",))
    crashy = stdio_server(record, "--crash", name="crashy")
    gated = stdio_server(record, name="gated", allow=("add",), require_approval="always")
    t0 = time.monotonic()
    w = await mcp_workers.start(mcp_agent(local, http_server),
                                mcp_agent(crashy, name="bad"), mcp_agent(gated, name="gated"))
    assert time.monotonic() - t0 < 15

    # A server that crashes at start fails the sessions that use it, with its stderr tail;
    # the others work.
    done, events = await ask(sqlite_store, owner, 'call crashy__add {"a": 1, "b": 1}', "bad")
    assert done.status is Status.FAILED and done.error is not None
    assert done.error.code == "mcp_unavailable"
    assert "MCP server 'crashy' did not start" in done.error.message
    assert "fatal: cannot open /nonexistent/config.db" in done.error.message
    assert by_type(events, "session_end")[0].data["status"] == "failed"

    # Discovery: namespaced, filtered, the server's JSON schema passed on as-is.
    names = {t.name for t in w.mcp.tools_for([local])}
    assert {"test__add", "test__hang", "test__ledger"} <= names and "test__die" not in names
    add = next(t for t in w.mcp.tools_for([local]) if t.name == "test__add")
    listed = next(t for t in w.mcp.connection("test").tools if t.name == "add")
    assert add.spec().parameters == listed.inputSchema
    ledger = next(t for t in w.mcp.tools_for([local]) if t.name == "test__ledger")
    assert ledger.idempotent and not ledger.destructive and not add.destructive

    # A call carries `session_id:call_id` as its idempotency key in `_meta`.
    done, events = await ask(sqlite_store, owner, 'call test__add {"a": 2, "b": 3}')
    assert done.status is Status.SUCCEEDED, done.error
    start, end = by_type(events, "tool_start")[0], by_type(events, "tool_end")[0]
    assert end.data["ok"] is True and end.data["result"] == {"text": "5"}
    assert "answered: 5." in by_type(events, "message_end")[-1].data["text"]
    assert [c["key"] for c in calls(record)] == [f"{done.id}:{start.data['call_id']}"]

    # Arguments that do not fit the schema: an error result, and the server is not called.
    done, events = await ask(sqlite_store, owner, 'call test__add {"a": "two"}')
    end = by_type(events, "tool_end")[0]
    assert end.data["ok"] is False and "invalid arguments for tool 'test__add'" in \
        end.data["error"] and "'two' is not of type 'integer'" in end.data["error"]
    assert "'b' is a required property" in end.data["error"]
    assert len(calls(record)) == 1

    # isError: a failed result, red in the transcript, an error to the model.
    done, events = await ask(sqlite_store, owner, "call test__broken {}")
    end = by_type(events, "tool_end")[0]
    assert end.data["ok"] is False
    assert end.data["error"]["message"].endswith("the disk is on fire")
    assert end.data["error"]["retryable"] is False
    assert "failed: " in by_type(events, "message_end")[-1].data["text"]

    # Text and image content are kept apart, the image inline while it is small.
    done, events = await ask(sqlite_store, owner, "call test__picture {}")
    result = by_type(events, "tool_end")[0].data["result"]
    assert result["text"] == "a red dot"
    assert result["content"] == [{"type": "image", "mime_type": "image/png",
                                  "data": "iVBORw0KGgo="}]

    # Streamable HTTP, with progress notifications as tool progress events.
    done, events = await ask(sqlite_store, owner, 'call web__slow {"steps": 3}')
    assert done.status is Status.SUCCEEDED, done.error
    assert [e.data["message"] for e in by_type(events, "tool_progress")] == [
        "step 1 of 3", "step 2 of 3", "step 3 of 3"]
    assert by_type(events, "tool_end")[0].data["result"]["text"] == "took 3 steps"

    # The HTTP server dies mid-call: a failed result at once, not a wait for the timeout.
    t0 = time.monotonic()
    done, events = await ask(sqlite_store, owner, "call web__die {}")
    end = by_type(events, "tool_end")[0]
    assert end.data["ok"] is False and end.data["error"]["retryable"] is True
    assert "MCP server 'web' went away" in end.data["error"]["message"]
    assert time.monotonic() - t0 < 10

    # A server with require_approval: its calls wait for a person before they reach it.
    before = len(calls(record))
    s = await sqlite_store.create_session(owner, agent="gated", model="demo:scripted",
                                          prompt='call gated__add {"a": 1, "b": 2}')
    waiting = await eventually(
        lambda: _pending(sqlite_store, s.id), 15, what="an MCP call waiting for approval")
    assert waiting.tool == "gated__add" and len(calls(record)) == before
    await sqlite_store.decide_approval(owner, s.id, waiting.id, "approve")
    done = await settled(sqlite_store, s.id)
    assert by_type(await all_events(sqlite_store, s.id), "tool_end")[0].data["result"] == {
        "text": "3"}
    assert len(calls(record)) == before + 1


async def _pending(store: SqliteStore, session_id: str):
    found = [a for a in await store.approvals(session_id) if a.pending]
    return found[0] if found else None


async def test_cancel_death_and_changed_tools(sqlite_store: SqliteStore,
                                              mcp_workers: McpWorkers, owner: str,
                                              record: Path):
    server = stdio_server(record, tool_timeouts={"ledger": 0.3})
    w = await mcp_workers.start(mcp_agent(server), backstop_interval=None,
                                heartbeat_interval=5, lease_ttl=20)
    conn = w.mcp.connection("test")

    # A hanging tool: cancel returns within the usual bar, and the server is told.
    s = await sqlite_store.create_session(owner, agent="mcp", model="demo:scripted",
                                          prompt="call test__hang {}")
    await eventually(lambda: [c for c in calls(record) if c["event"] == "start"],
                     what="the hang call reached the server")
    t0 = time.monotonic()
    await sqlite_store.request_cancel(owner, s.id)
    done = await settled(sqlite_store, s.id, timeout=5)
    assert time.monotonic() - t0 < 1.0
    assert done.status is Status.CANCELLED
    end = by_type(await all_events(sqlite_store, s.id), "tool_end")[0]
    assert end.data["interrupted"] is True and end.data["ok"] is False
    key = calls(record)[0]["key"]
    await eventually(lambda: {"event": "cancelled", "key": key} in [
        {"event": c["event"], "key": c["key"]} for c in calls(record)],
        what="the server recorded notifications/cancelled")

    # An interrupting follow-up aborts the call the same way, and the run goes on.
    s = await sqlite_store.create_session(owner, agent="mcp", model="demo:scripted",
                                          prompt="call test__hang {}")
    await eventually(lambda: len([c for c in calls(record) if c["event"] == "start"]) == 2,
                     what="the second hang call reached the server")
    await sqlite_store.post_message(owner, s.id, "never mind", mode="interrupt")
    done = await settled(sqlite_store, s.id, timeout=5)
    assert done.status is Status.SUCCEEDED
    end = by_type(await all_events(sqlite_store, s.id), "tool_end")[0]
    assert end.data["interrupted"] is True
    key = [c for c in calls(record) if c["event"] == "start"][1]["key"]
    await eventually(lambda: {"event": "cancelled", "key": key} in [
        {"event": c["event"], "key": c["key"]} for c in calls(record)],
        what="the server recorded the interrupt's notifications/cancelled")

    # A per-tool timeout: a failed result, and the server is told to stop too.
    done, events = await ask(sqlite_store, owner, 'call test__ledger {"seconds": 30}')
    assert by_type(events, "tool_end")[0].data["error"] == "timed out after 0.3s"
    await eventually(lambda: [c for c in calls(record)
                              if c["tool"] == "ledger" and c["event"] == "cancelled"],
                     what="the server saw the timed-out call cancelled")

    # tools/list_changed: the worker lists the tools again.
    done, _ = await ask(sqlite_store, owner, "call test__grow {}")
    assert done.status is Status.SUCCEEDED
    before = {t.name for t in w.mcp.tools_for([server])}
    await eventually(lambda: "extra" in {t.name for t in conn.tools}, what="a new tool")
    assert {t.name for t in w.mcp.tools_for([server])} == before | {"test__extra"}

    # The server dies mid-call: a failed result naming it; the connection comes back.
    assert conn.connects == 1
    done, events = await ask(sqlite_store, owner, "call test__die {}")
    end = by_type(events, "tool_end")[0]
    assert end.data["ok"] is False and end.data["error"]["retryable"] is True
    assert "MCP server 'test' went away" in end.data["error"]["message"]
    await eventually(lambda: conn.ready and conn.connects == 2, timeout=10,
                     what="the connection restarted")
    done, events = await ask(sqlite_store, owner, 'call test__add {"a": 1, "b": 1}')
    assert by_type(events, "tool_end")[0].data["result"]["text"] == "2"


async def test_servers_that_cannot_be_reached_are_named_with_the_cause():
    pool = McpPool([HttpServer(name="nohost", url=f"http://127.0.0.1:{free_port()}/mcp"),
                    StdioServer(name="nocmd", command="/nonexistent/mcp-server")])
    t0 = time.monotonic()
    await pool.start()
    try:
        assert time.monotonic() - t0 < 5
        with pytest.raises(McpUnavailable, match="MCP server 'nohost' did not start: "
                                                 "ConnectError"):
            pool.tools_for(pool.servers[:1])
        with pytest.raises(McpUnavailable, match=r"(?s)MCP server 'nocmd' did not start: .*"
                           r"cannot run '/nonexistent/mcp-server': No such file"):
            pool.tools_for(pool.servers[1:])
    finally:
        await pool.close()
