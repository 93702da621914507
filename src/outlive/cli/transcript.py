"""A session as plain text for the terminal: `outlive sessions tail` (events as they come) and
`outlive sessions show` (the snapshot's transcript items). Pure formatting: text in, text out.

The marks are words, not colours, so they survive pipes and logs: a partial answer cut by a
cancel ends with `[cancelled: partial answer]`, a question lists its options numbered.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["TranscriptWriter", "event_json", "item_lines"]

_STOPPED = {
    "cancelled": "[cancelled: partial answer]",
    "interrupted": "[interrupted: partial answer]",
    "length": "[cut at the length limit]",
}


def _short(value: Any, limit: int = 200) -> str:
    """A value on one line: a message when it has one, else compact JSON, cut at `limit`."""
    if isinstance(value, Mapping) and isinstance(value.get("message"), str):
        value = value["message"]
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False,
                                                            separators=(",", ":"))
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _duration(ms: Any) -> str:
    if not isinstance(ms, int | float) or isinstance(ms, bool):
        return ""
    return f" in {ms / 1000:.1f} s" if ms >= 1000 else f" in {int(ms)} ms"


def _approval_asked(data: Mapping[str, Any]) -> list[str]:
    """A call waiting for a decision, with the command that makes it."""
    return [f"? approve {data.get('tool') or 'tool'} {_short(data.get('args') or {})}",
            f"  outlive sessions approve|deny SESSION {data.get('approval_id')}"]


def _approval_decided(data: Mapping[str, Any]) -> str:
    reason = data.get("reason")
    word = {"approve": "approved", "deny": "denied"}.get(str(data.get("decision")), "decided")
    if word == "denied" and reason == "expired":
        return "  expired: nobody decided in time"
    return f"  {word}" + (f": {reason}" if reason else "")


def _question(question: Any, options: Any) -> list[str]:
    lines = [f"? {_short(question, 2000)}"]
    if isinstance(options, Sequence) and not isinstance(options, str):
        lines += [f"  {n}. {_short(o)}" for n, o in enumerate(options, 1)]
    return lines


def _tool_end(tool: str, data: Mapping[str, Any], status: str) -> str:
    took = _duration(data.get("duration_ms"))
    if status == "done":
        return f"  ✓ {tool}{took}"
    if status == "interrupted":
        return f"  ✗ {tool} interrupted{took}"
    return f"  ✗ {tool} failed{took}: {_short(data.get('error'))}"


def _session_end(data: Mapping[str, Any]) -> str:
    line = f"— session {data.get('status') or 'ended'}"
    if data.get("error"):
        line += f": {_short(data['error'])}"
    return line


def event_json(seq: int, ts: str, type_: str, data: Mapping[str, Any]) -> str:
    """One event as one line of JSON (`tail --json`)."""
    return json.dumps({"seq": seq, "ts": ts, "type": type_, "data": data}, ensure_ascii=False,
                      separators=(",", ":"))


class TranscriptWriter:
    """Turns session events, in order, into the text to print: deltas run on, everything else
    gets its own line. `feed` returns what to write (possibly nothing)."""

    def __init__(self) -> None:
        self._open: str | None = None  # "text" or "thinking" while a line is running on
        self._tools: dict[str, str] = {}

    def _block(self, *lines: str) -> str:
        head = "\n" if self._open else ""
        self._open = None
        return head + "".join(line + "\n" for line in lines)

    def _delta(self, kind: str, text: str) -> str:
        if not text:
            return ""
        out = ""
        if self._open != kind:
            out = "\n" if self._open else ""
            out += "(thinking) " if kind == "thinking" else ""
        self._open = kind
        return out + text

    def feed(self, type_: str, data: Mapping[str, Any]) -> str:
        if type_ == "text_delta":
            return self._delta("text", str(data.get("text") or ""))
        if type_ == "thinking_delta":
            return self._delta("thinking", str(data.get("text") or ""))
        if type_ == "message_end":
            mark = _STOPPED.get(str(data.get("stop_reason")))
            if mark:
                return self._block(mark)
            return self._block() if self._open else ""
        if type_ == "user_message":
            delivery = data.get("delivery")
            note = f"  ({delivery})" if delivery and delivery != "steer" else ""
            return self._block(f"> {data.get('text', '')}{note}")
        if type_ == "user_question":
            return self._block(*_question(data.get("question"), data.get("options")))
        if type_ == "approval_requested":
            return self._block(*_approval_asked(data))
        if type_ == "approval_decided":
            return self._block(_approval_decided(data))
        if type_ == "tool_start":
            tool = str(data.get("tool") or "tool")
            self._tools[str(data.get("call_id"))] = tool
            return self._block(f"  → {tool} {_short(data.get('arguments') or {})}")
        if type_ == "tool_progress":
            return self._block(f"    … {_short(data.get('message'))}")
        if type_ == "tool_end":
            tool = self._tools.get(str(data.get("call_id")), "tool")
            status = ("interrupted" if data.get("interrupted")
                      else "done" if data.get("ok") is True else "error")
            return self._block(_tool_end(tool, data, status))
        if type_ == "error":
            retry = " (retrying)" if data.get("retrying") else ""
            return self._block(f"! {_short(data)}{retry}")
        if type_ == "session_resumed":
            return self._block(f"— resumed after {data.get('reason') or 'a stop'} "
                               f"(attempt {data.get('attempt', '?')})")
        if type_ == "session_interrupted":
            return self._block(f"— interrupted ({data.get('reason') or 'stopped'})")
        if type_ == "incomplete":
            return self._block(f"— incomplete: {data.get('reason') or 'unknown'}")
        if type_ == "title":
            return self._block(f"— title: {_short(data.get('title'))}")
        if type_ == "session_end":
            return self._block(_session_end(data))
        return ""  # session_start, turn_start, stage: nothing a reader needs

    def close(self) -> str:
        """What ends the output (a newline after a running line)."""
        return self._block()


def item_lines(item: Mapping[str, Any]) -> list[str]:
    """One transcript item of a snapshot (`GET /v1/sessions/{id}` → snapshot.state.items)."""
    kind = item.get("kind")
    if kind == "user":
        delivery = item.get("delivery")
        note = f"  ({delivery})" if delivery and delivery != "steer" else ""
        return [f"> {item.get('text', '')}{note}"]
    if kind == "assistant":
        lines = []
        if item.get("thinking"):
            lines.append(f"(thinking) {item['thinking']}")
        if item.get("text"):
            lines.append(str(item["text"]))
        status = str(item.get("status"))
        mark = _STOPPED.get(status) or _STOPPED.get(str(item.get("stop_reason")))
        if status == "streaming":
            mark = "[still writing…]"
        return [*lines, mark] if mark else lines
    if kind == "tool":
        tool = str(item.get("tool") or "tool")
        status = str(item.get("status"))
        lines = [f"  → {tool} {_short(item.get('arguments') or {})}"]
        progress = item.get("progress") or []
        if progress:
            lines.append(f"    … {_short(progress[-1])}")
        if status == "running":
            lines.append(f"  … {tool} running")
        else:
            lines.append(_tool_end(tool, item, status))
        return lines
    if kind == "question":
        return _question(item.get("question"), item.get("options"))
    if kind == "approval":
        lines = _approval_asked(item)
        if item.get("status") != "pending":
            lines.append(f"  {item.get('status')}"
                         + (f": {item['reason']}" if item.get("reason") else ""))
        return lines
    if kind == "marker":
        data = item.get("data") or {}
        if item.get("type") == "error":
            retry = " (retrying)" if data.get("retrying") else ""
            return [f"! {_short(data)}{retry}"]
        if item.get("type") == "resumed":
            return [f"— resumed after {data.get('reason') or 'a stop'}"]
        if item.get("type") == "interrupted":
            return [f"— interrupted ({data.get('reason') or 'stopped'})"]
    return []
