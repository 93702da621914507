"""A tiny MCP server, written with the official SDK, for the outlive MCP example.

`make mcp-example` starts outlive with examples/mcp/agents.toml (and `--demo-calls`, so the
demo model calls tools by name), which gives the demo agent this server's tools as
`example__add`, `example__countdown` and `example__shout`. In the workbench, send for
instance:

    call example__add {"a": 2, "b": 3}
    call example__countdown {"seconds": 5}
"""

from __future__ import annotations

import asyncio

from mcp.server.fastmcp import Context, FastMCP
from mcp.server.fastmcp.exceptions import ToolError
from mcp.types import ToolAnnotations

server = FastMCP("example")


@server.tool(annotations=ToolAnnotations(readOnlyHint=True, idempotentHint=True))
async def add(a: float, b: float) -> str:
    """Add two numbers."""
    return f"{a:g} + {b:g} = {a + b:g}"


@server.tool(annotations=ToolAnnotations(readOnlyHint=True))
async def countdown(seconds: int, ctx: Context) -> str:
    """Count down, one progress message a second (cancel it from the workbench)."""
    for left in range(seconds, 0, -1):
        await ctx.report_progress(seconds - left, seconds,
                                  f"{left} second{'s' if left != 1 else ''} left")
        await asyncio.sleep(1)
    return "lift-off"


@server.tool(annotations=ToolAnnotations(readOnlyHint=True))
async def shout(text: str) -> str:
    """Repeat a text in capitals; an empty text is an error."""
    if not text.strip():
        raise ToolError("there is nothing to shout")
    return text.upper() + "!"


if __name__ == "__main__":
    server.run("stdio")
