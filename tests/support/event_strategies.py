"""Hypothesis strategies for what a run appends to a session's log: turns streamed as deltas,
tool calls with progress, and the lifecycle events in between (the store writes the
`user_message` and `session_end` events itself)."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from outlive.domain.model import NewEvent

__all__ = ["run_events"]

_MESSAGE_IDS = st.sampled_from(["m1", "m2", "m3"])
_CALL_IDS = st.sampled_from(["c1", "c2"])
_TEXT = st.text(max_size=8)


@st.composite
def _turn(draw: st.DrawFn) -> list[NewEvent]:
    message_id = draw(_MESSAGE_IDS)
    out = [NewEvent("turn_start", {"turn": draw(st.integers(1, 3)), "message_id": message_id})]
    deltas = draw(st.lists(st.tuples(st.sampled_from(["text_delta", "thinking_delta"]), _TEXT),
                           max_size=6))
    out += [NewEvent(kind, {"message_id": message_id, "text": text}) for kind, text in deltas]
    if draw(st.integers(0, 4)):  # mostly the turn ends with its authoritative message
        text = "".join(t for k, t in deltas if k == "text_delta")
        stop = draw(st.sampled_from(["end_turn", "tool_use", "length", "cancelled"]))
        out.append(NewEvent("message_end", {"message_id": message_id, "text": text,
                                            "stop_reason": stop}))
    return out


@st.composite
def _tool_call(draw: st.DrawFn) -> list[NewEvent]:
    call_id = draw(_CALL_IDS)
    out = [NewEvent("tool_start", {"call_id": call_id, "tool": "t", "arguments": {"q": 1}})]
    out += [NewEvent("tool_progress", {"call_id": call_id, "message": m})
            for m in draw(st.lists(_TEXT, max_size=3))]
    if draw(st.integers(0, 3)):
        ok = draw(st.booleans())
        end: dict[str, Any] = {"call_id": call_id, "ok": ok, "duration_ms": 1}
        end.update({"result": draw(_TEXT)} if ok else {"error": draw(_TEXT)})
        out.append(NewEvent("tool_end", end))
    return out


_LIFECYCLE = st.sampled_from([
    NewEvent("session_start", {}),
    NewEvent("session_resumed", {"reason": "crash", "repaired_tool_calls": []}),
    NewEvent("stage", {"stage": "thinking"}),
    NewEvent("title", {"title": "a title"}),
    NewEvent("incomplete", {"reason": "length"}),
    NewEvent("error", {"code": "provider_error", "message": "x", "retrying": True}),
    NewEvent("user_question", {"question": "which?", "options": ["a", "b"]}),
    NewEvent("approval_requested", {"approval_id": "a1", "call_id": "c1", "tool": "t",
                                    "args": {"q": 1}, "expires_at": "2026-12-01T00:00:00Z"}),
    NewEvent("approval_decided", {"approval_id": "a1", "call_id": "c1", "tool": "t",
                                  "decision": "deny", "reason": "expired", "always": False}),
]).map(lambda e: [e])


def run_events(max_blocks: int = 12) -> st.SearchStrategy[list[NewEvent]]:
    """The events of one run, in the order a worker would append them."""
    blocks = st.lists(st.one_of(_turn(), _tool_call(), _LIFECYCLE), max_size=max_blocks)
    return blocks.map(lambda bs: [e for b in bs for e in b])
