"""The run fold's rules, each tested once here: what the three protocol projections render
(tests/unit/test_frontend_projections.py, tests/openai_api) follows from these steps."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from outlive.domain.events import ErrorBody, ToolEnd
from outlive.domain.model import Event
from outlive.domain.run_fold import (
    RunFold,
    decision_status,
    hidden_deltas,
    settled_status,
    tool_outcome,
)
from outlive.domain.run_steps import (
    ApprovalAnswered,
    ApprovalAsked,
    Compacted,
    PartClosed,
    PartDelta,
    PartOpened,
    QuestionAsked,
    RunClaimed,
    RunEnded,
    RunError,
    RunIncomplete,
    StateChanged,
    Step,
    ToolBegan,
    ToolFinished,
    ToolProgressed,
    TurnBegan,
    UsageReported,
)

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def events(*rows: tuple[str, dict[str, Any]]) -> list[Event]:
    return [Event("ses", seq, T0 + timedelta(seconds=seq), 1, 1, type_, data)
            for seq, (type_, data) in enumerate(rows, start=1)]


def steps(*rows: tuple[str, dict[str, Any]], hidden: frozenset[int] = frozenset()
          ) -> list[Step]:
    fold = RunFold(hidden)
    return [step for event in events(*rows) for step in fold.apply(event)]


def text(message_id: str, chunk: str) -> tuple[str, dict[str, Any]]:
    return ("text_delta", {"message_id": message_id, "text": chunk})


def thinking(message_id: str, chunk: str) -> tuple[str, dict[str, Any]]:
    return ("thinking_delta", {"message_id": message_id, "text": chunk})


def end(message_id: str, whole: str | None, stop: str = "end_turn") -> tuple[str, dict[str, Any]]:
    return ("message_end", {"message_id": message_id, "text": whole, "stop_reason": stop})


def tool_start(call_id: str) -> tuple[str, dict[str, Any]]:
    return ("tool_start", {"call_id": call_id, "tool": "t", "arguments": {"q": 1}})


def tool_end(call_id: str, **data: Any) -> tuple[str, dict[str, Any]]:
    return ("tool_end", {"call_id": call_id, "ok": True, "duration_ms": 1, **data})


def closed(got: list[Step]) -> list[tuple[str, str, str]]:
    return [(s.kind, s.part_id, s.how) for s in got if isinstance(s, PartClosed)]


# ---- parts ----------------------------------------------------------------------------------


def test_message_end_sends_what_the_deltas_lacked_and_its_text_is_authoritative() -> None:
    got = steps(text("m", "Hel"), end("m", "Hello"))
    assert got == [PartOpened("text", "m"), PartDelta("text", "m", "Hel"),
                   PartClosed("text", "m", "completed", tail="lo", text="Hello")]
    rewritten = steps(text("m", "Hel"), end("m", "Bye"))[-1]
    assert rewritten == PartClosed("text", "m", "completed", tail="", text="Bye")


def test_a_message_without_deltas_opens_its_text_at_message_end() -> None:
    assert steps(end("m", "All at once")) == [
        PartOpened("text", "m"), PartDelta("text", "m", "All at once"),
        PartClosed("text", "m", "completed", text="All at once")]
    assert steps(end("m", "")) == []


def test_cancelled_and_length_cut_a_part_short_keeping_its_text() -> None:
    for stop in ("cancelled", "length"):
        assert closed(steps(text("m", "a"), end("m", "ab", stop))) == [("text", "m", "cut_short")]


def test_a_text_delta_completes_the_same_messages_reasoning() -> None:
    got = steps(thinking("m", "hmm"), text("m", "A"))
    assert got[2] == PartClosed("reasoning", "m", "completed", text="hmm")
    assert got[3:] == [PartOpened("text", "m"), PartDelta("text", "m", "A")]


def test_parts_are_abandoned_when_what_streamed_them_is_gone() -> None:
    for gone in (("session_resumed", {"reason": "crash", "attempt": 2,
                                      "repaired_tool_calls": []}),
                 ("session_interrupted", {"reason": "shutdown", "attempt": 1})):
        got = steps(thinking("a", "x"), text("b", "y"), gone)
        assert closed(got) == [("reasoning", "a", "abandoned"), ("text", "b", "abandoned")]
    restarted = steps(thinking("m", "x"), text("m", "y"), text("n", "z"),
                      ("turn_start", {"turn": 1, "message_id": "m"}))
    assert closed(restarted)[1:] == [("text", "m", "abandoned")]  # n stays open
    assert isinstance(restarted[-1], TurnBegan)
    retried = steps(text("m", "y"), end("m", "y and more", "interrupted"))
    assert retried[-1] == PartClosed("text", "m", "abandoned")  # no tail, no text


def test_part_ids_are_unique_within_the_run() -> None:
    got = steps(text("m", "a"), end("m", "a", "interrupted"), text("m", "b"),
                ("text_delta", {"message_id": None, "text": "c"}))
    opened = [s.part_id for s in got if isinstance(s, PartOpened)]
    assert opened == ["m", "m_3", "msg_4"]


def test_hidden_deltas_leave_a_replayed_abandoned_part_out() -> None:
    rows = (thinking("m", "x"), text("m", "y"), end("m", "y", "interrupted"), text("n", "z"),
            end("n", "z"), ("session_end", {"status": "succeeded"}), text("k", "after"))
    hidden = hidden_deltas(events(*rows))
    assert hidden == {1, 2}  # the abandoned answer's thinking goes with it
    assert [s.part_id for s in steps(*rows[:6], hidden=hidden)
            if isinstance(s, PartOpened)] == ["n"]


# ---- tools ----------------------------------------------------------------------------------


def test_tool_lifecycle_and_a_receipts_outcome() -> None:
    got = steps(tool_start("c"), ("tool_progress", {"call_id": "c", "message": "half"}),
                tool_end("c", result={"r": 1}))
    assert got == [ToolBegan("c", "t", {"q": 1}, logged_id="c"), ToolProgressed("c", "half"),
                   ToolFinished("c", "ok", result={"r": 1})]
    assert tool_outcome(ToolEnd(call_id="c", ok=True, duration_ms=0, interrupted=True)) \
        == "interrupted"
    assert tool_outcome(ToolEnd(call_id="c", ok=False, duration_ms=0)) == "error"


def test_a_resumed_run_re_announcing_its_call_and_a_duplicate_receipt_add_nothing() -> None:
    got = steps(tool_start("c"), ("session_resumed", {"reason": "crash", "attempt": 2,
                                                      "repaired_tool_calls": []}),
                tool_start("c"), tool_end("c"), tool_end("c"))
    assert [type(s) for s in got] == [ToolBegan, RunClaimed, ToolFinished]


def test_a_receipt_for_a_call_never_started_starts_it_first() -> None:
    got = steps(tool_end("c", ok=False, error="denied"))
    assert got == [ToolBegan("c", "", {}, logged_id="c"),
                   ToolFinished("c", "error", error="denied")]


def test_a_call_that_ended_and_starts_again_is_started_again_under_a_unique_id() -> None:
    got = steps(tool_start("c"), tool_end("c", ok=False, interrupted=True), tool_start("c"),
                tool_end("c"))
    assert got[2:] == [ToolBegan("c_3", "t", {"q": 1}, again=True, logged_id="c"),
                       ToolFinished("c_3", "ok", again=True)]


# ---- the end --------------------------------------------------------------------------------


def test_the_end_cuts_open_parts_short_and_interrupts_running_tools_in_call_id_order() -> None:
    got = steps(text("m", "par"), tool_start("b"), tool_start("a"),
                ("session_end", {"status": "failed", "error": {"code": "x", "message": "y"}}))
    assert got[4:] == [
        PartClosed("text", "m", "cut_short", text="par"),
        ToolFinished("a", "interrupted", error="interrupted"),
        ToolFinished("b", "interrupted", error="interrupted"),
        RunEnded("failed", "", ErrorBody(code="x", message="y"), None, None)]


def test_close_open_is_what_a_protocol_ending_early_closes() -> None:
    fold = RunFold()
    for event in events(text("m", "a"), tool_start("c")):
        fold.apply(event)
    assert [type(s) for s in fold.close_open()] == [PartClosed, ToolFinished]
    assert fold.close_open() == []


def test_the_run_ends_with_its_last_unretried_error_and_incompleteness() -> None:
    got = steps(("error", {"code": "busy", "message": "retry", "retrying": True}),
                ("error", {"code": "boom", "message": "it broke"}),
                ("incomplete", {"reason": "length"}),
                ("session_end", {"status": "weird", "reason": "r"}))
    assert got == [RunError("boom", "it broke"), RunIncomplete("length"),
                   RunEnded("failed", "r", None, RunError("boom", "it broke"), "length")]


def test_questions_approvals_state_and_usage() -> None:
    got = steps(
        ("user_question", {"question": "Which?", "options": ["a"], "call_id": None}),
        ("approval_requested", {"approval_id": "ap", "call_id": "c", "tool": "t",
                                "args": {"x": 1}, "expires_at": "soon"}),
        ("approval_decided", {"approval_id": "ap", "call_id": "c", "tool": "t",
                              "decision": "deny", "always": False, "reason": "expired"}),
        ("stage", {"stage": "s"}), ("title", {"title": "t"}),
        ("message_end", {"message_id": "m", "text": None, "stop_reason": "end_turn",
                         "usage": {"input_tokens": 3, "output_tokens": 4}}))
    assert got == [QuestionAsked(1, "question_1", "Which?", ["a"]),
                   ApprovalAsked("ap", "c", "t", {"x": 1}, "soon"),
                   ApprovalAnswered("ap", "c", "t", "expired", "expired"),
                   StateChanged(), StateChanged(), UsageReported(3, 4)]


def test_a_compaction_is_a_step_where_it_happened_and_closes_nothing() -> None:
    data = {"method": "trim", "reason": "threshold", "through_entry": 0, "covered_entries": 0,
            "trimmed": 2, "tokens_before": 900, "tokens_after": 400, "window": 1000}
    got = steps(text("m", "Hel"), ("context_compacted", data), end("m", "Hello"))
    assert got[2] == Compacted(2, data)
    assert closed(got) == [("text", "m", "completed")]


def test_a_question_under_a_used_call_id_gets_a_unique_one() -> None:
    got = steps(tool_start("c"), tool_end("c"),
                ("user_question", {"question": "?", "options": [], "call_id": "c"}))
    assert got[-1] == QuestionAsked(3, "c_3", "?", [])


def test_decision_and_settled_status() -> None:
    assert decision_status("approve", None) == "approved"
    assert decision_status("deny", "expired") == "expired"
    assert decision_status("deny", "no") == decision_status(None, None) == "denied"
    assert settled_status("succeeded") == "succeeded"
    assert settled_status("running") == "failed"


def test_the_fold_is_pure_the_same_slice_gives_the_same_steps() -> None:
    rows = (thinking("m", "x"), text("m", "y"), tool_start("c"), end("m", "yz"),
            ("session_end", {"status": "cancelled", "reason": "user"}))
    assert steps(*rows) == steps(*rows)
