"""A real MCP server for the tests, written with the SDK's own server API (FastMCP).

`python tests/mcp/server.py RECORD_DIR [--http PORT] [--crash]`: serves over stdio (or
streamable HTTP on 127.0.0.1:PORT), writes its pid to RECORD_DIR/pid-<transport>, and
appends one JSON line per tool event to RECORD_DIR/calls.jsonl: `start` (with the
idempotency key it was given in `_meta`, and the `traceparent` of `_meta` and of the HTTP
request), `done` and `cancelled`. `--crash` writes an error
to stderr and exits before serving, like a server with a bad configuration; `--stubborn`
stays alive after its stdin closes, like a server that ignores the end of its session.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from pathlib import Path

from mcp.server.fastmcp import Context, FastMCP
from mcp.server.fastmcp.exceptions import ToolError
from mcp.types import ImageContent, TextContent, ToolAnnotations

RECORD = Path(sys.argv[1])
HTTP_PORT = int(sys.argv[sys.argv.index("--http") + 1]) if "--http" in sys.argv else None

if "--crash" in sys.argv:
    sys.stderr.write("starting the test server\nfatal: cannot open /nonexistent/config.db\n")
    sys.stderr.flush()
    sys.exit(3)

server = FastMCP("test", host="127.0.0.1", port=HTTP_PORT or 8000, log_level="WARNING")


def record(event: str, tool: str, ctx: Context) -> None:
    meta = ctx.request_context.meta
    extra = (meta.model_extra or {}) if meta is not None else {}
    request = ctx.request_context.request  # the HTTP request; None over stdio
    headers = getattr(request, "headers", None)
    line = json.dumps({"event": event, "tool": tool, "key": extra.get("idempotency_key"),
                       "pid": os.getpid(), "t": time.time(),
                       "traceparent": extra.get("traceparent"),
                       "traceparent_header": headers.get("traceparent") if headers else None})
    with open(RECORD / "calls.jsonl", "a") as f:
        f.write(line + "\n")


@server.tool(annotations=ToolAnnotations(readOnlyHint=True))
async def add(a: int, b: int, ctx: Context) -> str:
    """Add two integers."""
    record("start", "add", ctx)
    return str(a + b)


@server.tool()
async def slow(steps: int, ctx: Context, delay: float = 0.05) -> str:
    """Take `steps` steps, reporting progress after each."""
    for i in range(1, steps + 1):
        await asyncio.sleep(delay)
        await ctx.report_progress(i, steps, f"step {i} of {steps}")
    return f"took {steps} steps"


@server.tool()
async def broken(ctx: Context) -> str:
    """Always fails."""
    raise ToolError("the disk is on fire")


@server.tool()
async def picture(ctx: Context) -> list[TextContent | ImageContent]:
    """A caption and a tiny image."""
    return [TextContent(type="text", text="a red dot"),
            ImageContent(type="image", mimeType="image/png", data="iVBORw0KGgo=")]


async def _wait(tool: str, seconds: float, ctx: Context) -> str:
    record("start", tool, ctx)
    try:
        await asyncio.sleep(seconds)
    except asyncio.CancelledError:
        record("cancelled", tool, ctx)
        raise
    record("done", tool, ctx)
    return f"waited {seconds:g}s"


@server.tool()
async def hang(ctx: Context, seconds: float = 3600) -> str:
    """Wait (an hour by default); records a cancellation."""
    return await _wait("hang", seconds, ctx)


@server.tool(annotations=ToolAnnotations(idempotentHint=True, destructiveHint=False))
async def ledger(ctx: Context, seconds: float = 0) -> str:
    """Idempotent: a repeat of a key it has seen returns at once instead of working again."""
    meta = ctx.request_context.meta
    key = (meta.model_extra or {}).get("idempotency_key") if meta is not None else None
    seen = [c for c in _calls() if c["tool"] == "ledger" and c["key"] == key]
    return await _wait("ledger", 0 if seen else seconds, ctx)


def _calls() -> list[dict[str, object]]:
    path = RECORD / "calls.jsonl"
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


@server.tool()
async def die(ctx: Context) -> str:
    """The server process exits in the middle of the call."""
    os._exit(1)


@server.tool()
async def grow(ctx: Context) -> str:
    """Adds the tool `extra` and tells the client its tool list changed."""

    def extra() -> str:
        """Added at run time."""
        return "extra"

    server.add_tool(extra, name="extra")
    await ctx.session.send_tool_list_changed()
    return "grown"


def main() -> None:
    RECORD.mkdir(parents=True, exist_ok=True)
    (RECORD / f"pid-{'http' if HTTP_PORT else 'stdio'}").write_text(str(os.getpid()))
    server.run("streamable-http" if HTTP_PORT else "stdio")
    if "--stubborn" in sys.argv:
        time.sleep(3600)


if __name__ == "__main__":
    main()
