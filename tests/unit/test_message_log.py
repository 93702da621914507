"""`MessageLog` keeps `model_messages` of a growing history without rebuilding it per call."""

from __future__ import annotations

from typing import Any

from outlive.domain.model import Entry
from outlive.runtime.history import MessageLog, model_messages


def entry(seq: int, kind: str, **data: Any) -> Entry:
    return Entry("s", seq, kind, data, 1)


HISTORY = [
    entry(1, "user", text="hi"),
    entry(2, "assistant", message_id="m1", text="looking", stop_reason="tool_calls",
          status="complete",
          tool_calls=[{"call_id": "c1", "name": "lookup", "arguments": {"query": "hi"}}]),
    entry(3, "tool_result", call_id="c1", name="lookup", ok=True, result={"answer": 1}),
    entry(4, "assistant", message_id="m2", text="cut", status="cancelled"),
    entry(5, "note", text="not for the model"),
    entry(6, "tool_result", call_id="c2", name="flaky", ok=False, error="boom"),
    entry(7, "user", text="again"),
]


def test_the_log_matches_model_messages_as_the_history_grows() -> None:
    log = MessageLog("be brief")
    history: list[Entry] = []
    for e in HISTORY:
        history.append(e)
        assert log.messages(history) == model_messages("be brief", history)
    assert log.messages(history) == model_messages("be brief", history)  # nothing new


def test_a_new_history_starts_the_log_again() -> None:
    log = MessageLog("")
    log.messages(list(HISTORY))
    fresh = [entry(1, "user", text="other")]
    assert log.messages(fresh) == model_messages("", fresh)
    fresh.append(entry(2, "assistant", message_id="m", text="ok", status="complete"))
    assert log.messages(fresh) == model_messages("", fresh)


def test_callers_get_a_list_of_their_own() -> None:
    log = MessageLog("sys")
    first = log.messages([HISTORY[0]])
    first.clear()
    assert len(log.messages([HISTORY[0]])) == 2
