"""A session as plain text for the terminal: `outlive sessions tail` (events as they come) and
`outlive sessions show` (the snapshot's transcript items). Pure formatting: text in, text out.

The marks are words, not colours, so they survive pipes and logs: a partial answer cut by a
cancel ends with `[cancelled: partial answer]`, a question lists its options numbered, and
where the run made the model's view smaller a divider says so (`── earlier context
summarized (42 entries, 2,950 → 610 tokens of 3,000) ──`); `show` prints the summary under
it, `tail` only the divider (a summary is long, and `show` has it whenever it is wanted).

A delegation call (a tool `agent__<name>`, docs/subagents.md) names the child session it
started and how that child is doing: `tail` a line when the child starts and when it ends,
and the child's id on the call's result; `show` one line under the call with the child's id
and status (the child's current one when the caller has it, else what the parent's log
says).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from ..domain.events import (
    RESUMED_AFTER_CHILDREN,
    RESUMED_AFTER_DECISION,
    UNSET,
    ApprovalDecided,
    ApprovalRequested,
    ChildEnded,
    ChildStarted,
    ClientToolCall,
    ClientToolResult,
    ContextCompacted,
    Error,
    ErrorBody,
    EventPayload,
    Forked,
    Incomplete,
    MessageEnd,
    SessionEnd,
    SessionInterrupted,
    SessionResumed,
    TextDelta,
    ThinkingDelta,
    Title,
    ToolEnd,
    ToolProgress,
    ToolStart,
    Unknown,
    UserMessage,
    UserQuestion,
    parse,
)

__all__ = ["TranscriptWriter", "event_json", "item_lines", "transcript_lines"]

_STOPPED = {
    "cancelled": "[cancelled: partial answer]",
    "interrupted": "[interrupted: partial answer]",
    "length": "[cut at the length limit]",
}


_MARKER_EVENTS = {"error": "error", "resumed": "session_resumed",
                  "interrupted": "session_interrupted", "compacted": "context_compacted"}
"""The event each kind of snapshot marker the CLI shows was made from."""


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


def _approval_asked(tool: Any, args: Any, approval_id: Any) -> list[str]:
    """A call waiting for a decision, with the command that makes it."""
    return [f"? approve {tool or 'tool'} {_short(args or {})}",
            f"  outlive sessions approve|deny SESSION {approval_id}"]


def _client_call(name: Any, args: Any, call_id: Any) -> list[str]:
    """A call the session's client runs, waiting for its result (docs/client-tools.md)."""
    return [f"? client tool {name or 'tool'} {_short(args or {})}",
            f"  waiting for its client: POST /v1/sessions/SESSION/tool-results "
            f"{{\"call_id\": \"{call_id}\", \"output\": …}}"]


_CLIENT_STATUS = {"answered": "  answered by its client", "failed": "  its client: error",
                  "expired": "  expired: nobody answered in time",
                  "cancelled": "  cancelled with the session"}


def _approval_decided(decided: ApprovalDecided) -> str:
    reason = decided.reason
    word = {"approve": "approved", "deny": "denied"}.get(str(decided.decision), "decided")
    if word == "denied" and reason == "expired":
        return "  expired: nobody decided in time"
    return f"  {word}" + (f": {reason}" if reason else "")


def _question(question: Any, options: Any) -> list[str]:
    lines = [f"? {_short(question, 2000)}"]
    if isinstance(options, Sequence) and not isinstance(options, str):
        lines += [f"  {n}. {_short(o)}" for n, o in enumerate(options, 1)]
    return lines


DELEGATION_PREFIX = "agent__"
"""A delegation call's tool name: `agent__<the sub-agent's name>`."""


def _delegated(tool: Any) -> bool:
    return (isinstance(tool, str) and tool.startswith(DELEGATION_PREFIX)
            and tool != DELEGATION_PREFIX)


def _call_child(result: Any, error: Any) -> tuple[str | None, str | None]:
    """The child a delegation call's result or error names, and its status as the call
    tells it (`detached` for a call that did not wait)."""
    if isinstance(result, Mapping) and isinstance(result.get("child_id"), str):
        return result["child_id"], "detached" if result.get("detached") else "succeeded"
    value = error.get("value") if isinstance(error, Mapping) else None
    if isinstance(value, Mapping) and isinstance(value.get("child_id"), str):
        status = value.get("status")
        word = "waiting for you" if value.get("attention") == "question" else (
            "budget reached" if value.get("attention") == "budget" else status)
        return value["child_id"], str(word or "ended")
    return None, None


def _child_note(child_id: str, status: str) -> str:
    return f"sub-agent {child_id} {status}"


def _tool_end(tool: str, duration_ms: Any, error: Any, status: str) -> str:
    took = _duration(duration_ms)
    if status == "done":
        return f"  ✓ {tool}{took}"
    if status == "interrupted":
        return f"  ✗ {tool} interrupted{took}"
    return f"  ✗ {tool} failed{took}: {_short(error)}"


def _session_end(end: SessionEnd) -> str:
    line = f"— session {end.status or 'ended'}"
    error = end.error
    if isinstance(error, ErrorBody):
        line += f": {_short(error.message if error.message is not None else _body(error))}"
    elif error:
        line += f": {_short(error)}"
    return line


def _body(error: ErrorBody) -> dict[str, Any]:
    return {"code": error.code, "message": error.message}


def _error(error: Error) -> str:
    text = _short(error.message if error.message is not None else error.data())
    return f"! {text}" + (" (retrying)" if error.retrying else "")


def _resumed(resumed: SessionResumed) -> str:
    if resumed.reason == RESUMED_AFTER_DECISION:
        return "— continued after your decision"
    if resumed.reason == RESUMED_AFTER_CHILDREN:
        return "— continued with its sub-agents' results"
    return f"— resumed after {resumed.reason or 'a stop'}"


def _interrupted(interrupted: SessionInterrupted) -> str:
    return f"— interrupted ({interrupted.reason or 'stopped'})"


_COMPACTED = {"trim": "old tool results trimmed",
              "truncation": "earlier messages left out of the model's view"}


def _count(n: int, one: str, many: str) -> str:
    return f"{n:,} {one if n == 1 else many}"


def _compacted(c: ContextCompacted, *, full: bool) -> list[str]:
    """The divider where the model's view was made smaller; `full`: the summary under it."""
    what = _COMPACTED.get(c.method, "earlier context summarized")
    covered = (_count(c.trimmed, "tool result", "tool results") if c.method == "trim"
               else _count(c.covered_entries, "entry", "entries"))
    window = f" of {c.window:,}" if c.window else ""
    lines = [f"── {what} ({covered}, {c.tokens_before:,} → {c.tokens_after:,} tokens"
             f"{window}) ──"]
    if c.error:
        lines.append(f"  the summarizer failed: {_short(c.error)}")
    if full and c.summary:
        lines.extend(f"  {line}".rstrip() for line in c.summary.splitlines())
    return lines


def _user(text: Any, delivery: Any) -> str:
    note = f"  ({delivery})" if delivery and delivery != "steer" else ""
    return f"> {text}{note}"


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

    def feed(self, event: EventPayload | Unknown) -> str:
        """The text of one event's payload (`Event.payload`)."""
        match event:
            case TextDelta(text=text):
                return self._delta("text", text)
            case ThinkingDelta(text=text):
                return self._delta("thinking", text)
            case MessageEnd(stop_reason=stop_reason):
                mark = _STOPPED.get(str(stop_reason))
                if mark:
                    return self._block(mark)
                return self._block() if self._open else ""
            case UserMessage(text=text, delivery=delivery):
                return self._block(_user(text, delivery))
            case UserQuestion(question=question, options=options):
                return self._block(*_question(question, options))
            case ApprovalRequested(tool=tool, args=args, approval_id=approval_id):
                return self._block(*_approval_asked(tool, args, approval_id))
            case ApprovalDecided():
                return self._block(_approval_decided(event))
            case ClientToolCall(name=name, args=args, call_id=call_id):
                return self._block(*_client_call(name, args, call_id))
            case ClientToolResult(ok=ok, reason=reason):
                status = "answered" if ok else "expired" if reason == "expired" else "failed"
                return self._block(_CLIENT_STATUS[status])
            case ToolStart(call_id=call_id, tool=tool, arguments=arguments):
                name = tool or "tool"
                self._tools[str(call_id)] = name
                return self._block(f"  → {name} {_short(arguments or {})}")
            case ToolProgress(message=message):
                return self._block(f"    … {_short(message)}")
            case ToolEnd(call_id=call_id, duration_ms=duration_ms, error=error):
                status = ("interrupted" if event.interrupted
                          else "done" if event.ok else "error")
                tool = self._tools.get(str(call_id), event.tool or "tool")
                line = _tool_end(tool, duration_ms, None if error is UNSET else error, status)
                child, said = _call_child(None if event.result is UNSET else event.result,
                                          None if error is UNSET else error)
                if _delegated(tool) and child is not None and said is not None:
                    line += f" ({_child_note(child, said)})"
                return self._block(line)
            case ChildStarted(child_id=child_id, agent=agent):
                return self._block(f"    ↳ sub-agent {agent} started: {child_id} "
                                   f"(outlive sessions tail {child_id})")
            case ChildEnded(child_id=child_id, status=status):
                return self._block(f"    ↳ {_child_note(child_id, status)}")
            case Error():
                return self._block(_error(event))
            case SessionResumed(reason=reason) if reason == RESUMED_AFTER_DECISION:
                return self._block(_resumed(event))
            case SessionResumed(attempt=attempt):
                shown = "?" if attempt is None else attempt
                return self._block(f"{_resumed(event)} (attempt {shown})")
            case SessionInterrupted():
                return self._block(_interrupted(event))
            case Incomplete(reason=reason):
                return self._block(f"— incomplete: {reason or 'unknown'}")
            case Title(title=title):
                return self._block(f"— title: {_short(title)}")
            case ContextCompacted():
                return self._block(*_compacted(event, full=False))
            case Forked(from_session_id=source, from_seq=seq):
                return self._block(f"── forked from {source} at event {seq} ──")
            case SessionEnd():
                return self._block(_session_end(event))
        return ""  # session_start, turn_start, stage: nothing a reader needs

    def close(self) -> str:
        """What ends the output (a newline after a running line)."""
        return self._block()


def transcript_lines(items: Sequence[Mapping[str, Any]],
                     children: Mapping[str, str] | None = None) -> list[str]:
    """A snapshot's items (`GET /v1/sessions/{id}` → snapshot.state.items) as text;
    `children`: the session's children's status words by id, if the caller has them. An answer
    cut off with nothing written says nothing, and one the run then wrote again (a later
    answer follows: a crash, a provider retry, an interrupt) is one line, not its partial
    text a second time (the web page folds it the same way)."""
    later_answer = False
    superseded: set[int] = set()
    for i in range(len(items) - 1, -1, -1):
        if items[i].get("kind") == "assistant":
            if later_answer and items[i].get("status") == "interrupted":
                superseded.add(i)
            later_answer = True
    links = _child_links(items)
    lines: list[str] = []
    for i, item in enumerate(items):
        if item.get("kind") == "assistant" and item.get("status") in _CUT_OFF:
            if not item.get("text") and not item.get("thinking"):
                continue
            if i in superseded:
                lines.append("[interrupted: written again below]")
                continue
        lines.extend(item_lines(item, links.get(str(item.get("call_id"))), children))
    return lines


def _child_links(items: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, str]]:
    """call id → what the child markers say of its child: `child_id`, `agent`, `ended`."""
    out: dict[str, dict[str, str]] = {}
    for item in items:
        data = item.get("data")
        if item.get("kind") != "marker" or not isinstance(data, Mapping):
            continue
        event = parse(str(item.get("type")), data)
        if isinstance(event, ChildStarted):
            out.setdefault(str(event.call_id), {}).update(child_id=event.child_id,
                                                          agent=event.agent)
        elif isinstance(event, ChildEnded):
            out.setdefault(str(event.call_id), {}).update(child_id=event.child_id,
                                                          ended=event.status)
    return out


def _delegation_line(item: Mapping[str, Any], link: Mapping[str, str] | None,
                     children: Mapping[str, str] | None) -> str | None:
    """`    ↳ sub-agent helper ses_…: running`: the child of a delegation call, with its
    status: `children`'s (the caller's current word for it), else the log's."""
    child, said = _call_child(item.get("result"), item.get("error"))
    link = link or {}
    child = link.get("child_id") or child
    if child is None:
        return None
    agent = link.get("agent") or str(item.get("tool"))[len(DELEGATION_PREFIX):]
    status = ((children or {}).get(child) or link.get("ended") or said
              or ("started" if item.get("status") == "running" else "ended"))
    return f"    ↳ sub-agent {agent} {child}: {status}"


_CUT_OFF = ("interrupted", "cancelled")


def item_lines(item: Mapping[str, Any], link: Mapping[str, str] | None = None,
               children: Mapping[str, str] | None = None) -> list[str]:
    """One transcript item of a snapshot, on its own (`transcript_lines` reads them all);
    a delegation call's `link`: what the child markers said of its child."""
    kind = item.get("kind")
    if kind == "user":
        return [_user(item.get("text", ""), item.get("delivery"))]
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
        child = _delegation_line(item, link, children) if _delegated(tool) else None
        if child is not None:
            lines.append(child)
        if status == "running":
            lines.append(f"  … {tool} running")
        else:
            lines.append(_tool_end(tool, item.get("duration_ms"), item.get("error"), status))
        return lines
    if kind == "question":
        return _question(item.get("question"), item.get("options"))
    if kind == "approval":
        lines = _approval_asked(item.get("tool"), item.get("args"), item.get("approval_id"))
        if item.get("status") != "pending":
            lines.append(f"  {item.get('status')}"
                         + (f": {item['reason']}" if item.get("reason") else ""))
        return lines
    if kind == "client_tool":
        lines = _client_call(item.get("name"), item.get("args"), item.get("call_id"))
        said = _CLIENT_STATUS.get(str(item.get("status")))
        return [lines[0], said] if said else lines
    if kind == "marker":
        # A marker item carries its event's data: read it as that event's payload.
        event = parse(_MARKER_EVENTS.get(str(item.get("type")), ""), item.get("data"))
        if isinstance(event, Error):
            return [_error(event)]
        if isinstance(event, SessionResumed):
            return [_resumed(event)]
        if isinstance(event, SessionInterrupted):
            return [_interrupted(event)]
        if isinstance(event, ContextCompacted):
            return _compacted(event, full=True)
    return []
