"""From an MCP `CallToolResult` to what outlive stores, shows and gives the model.

Text is kept as text (joined), structured content as JSON, small images and audio inline as
base64 (larger ones by size only, so one screenshot cannot bloat the event log), embedded
resources by their text or size, resource links by URI. A result with `isError` is a
`ToolFailure`: recorded, shown and given to the model as a failed result.
"""

from __future__ import annotations

import json
from typing import Any

from mcp import types

from ..tools import ToolFailure

__all__ = ["INLINE_BINARY_LIMIT", "convert_result"]

INLINE_BINARY_LIMIT = 8 * 1024
"""Base64 characters of an image, audio clip or blob kept in the result; larger ones are
described, not stored (the model is shown the result as JSON: a screenshot in base64 would
cost it tens of thousands of tokens and tell it nothing)."""


def convert_result(result: types.CallToolResult) -> dict[str, Any] | ToolFailure:
    """The JSON result of a call, or the failure the server reported."""
    texts: list[str] = []
    blocks: list[dict[str, Any]] = []
    for block in result.content:
        if isinstance(block, types.TextContent):
            texts.append(block.text)
        else:
            blocks.append(_block(block))
    if result.isError:
        message = "\n".join(texts).strip() or "the tool reported an error"
        detail = result.structuredContent if result.structuredContent is not None else (
            blocks or None)
        return ToolFailure(message, value=detail)
    text = "\n".join(texts)
    structured = result.structuredContent
    if structured is not None and texts:
        # Servers send structured content twice (as JSON text too), and SDKs wrap a plain
        # return value as {"result": text}: keep one copy.
        if _parses_to(text, structured):
            texts = []
        elif structured == {"result": text}:
            structured = None
    out: dict[str, Any] = {}
    if texts:
        out["text"] = text
    if blocks:
        out["content"] = blocks
    if structured is not None:
        out["structured"] = structured
    return out


def _parses_to(text: str, value: Any) -> bool:
    try:
        return bool(json.loads(text) == value)
    except ValueError:
        return False


def _binary(kind: str, mime: str | None, data: str) -> dict[str, Any]:
    item: dict[str, Any] = {"type": kind, "mime_type": mime}
    if len(data) <= INLINE_BINARY_LIMIT:
        item["data"] = data
    else:
        item["bytes"] = len(data) * 3 // 4
        item["note"] = "too large to keep; not stored"
    return item


def _block(block: types.ContentBlock) -> dict[str, Any]:
    if isinstance(block, types.ImageContent):
        return _binary("image", block.mimeType, block.data)
    if isinstance(block, types.AudioContent):
        return _binary("audio", block.mimeType, block.data)
    if isinstance(block, types.ResourceLink):
        return {"type": "resource_link", "uri": str(block.uri), "name": block.name,
                "mime_type": block.mimeType}
    if isinstance(block, types.EmbeddedResource):
        res = block.resource
        item: dict[str, Any] = {"type": "resource", "uri": str(res.uri),
                                "mime_type": res.mimeType}
        if isinstance(res, types.TextResourceContents):
            item["text"] = res.text
        else:
            item.update(_binary("resource", res.mimeType, res.blob))
        return item
    return {"type": str(getattr(block, "type", "unknown"))}
