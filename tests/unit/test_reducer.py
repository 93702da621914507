"""Transcript reducer: shapes per event type, and the split/replay invariants snapshots rely on."""

from __future__ import annotations

import copy
import json
import time
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from outlive.domain.model import EVENT_TYPES, Event
from outlive.domain.reducer import REDUCER_VERSION, apply, empty_state, fold

Ev = tuple[str, int, dict[str, Any]]


def numbered(*events: tuple[str, dict[str, Any]]) -> list[Ev]:
    return [(t, i, d) for i, (t, d) in enumerate(events, start=1)]


def run(*events: tuple[str, dict[str, Any]]) -> dict[str, Any]:
    return fold(numbered(*events))


# ---- shapes -------------------------------------------------------------------------------


def test_empty_state_shape() -> None:
    assert empty_state() == {
        "version": REDUCER_VERSION,
        "seq": 0,
        "status": "queued",
        "title": None,
        "stage": None,
        "attempt": 0,
        "error": None,
        "items": [],
        "pending_inputs": [],
        "question": None,
        "attention": None,
        "incomplete": None,
        "resumed": [],
    }
    assert REDUCER_VERSION == 3
    assert empty_state() is not empty_state()


def test_handles_every_event_type_of_the_design() -> None:
    for event_type in EVENT_TYPES:
        state = apply(empty_state(), event_type, 1, {})
        assert state["seq"] == 1
        assert json.loads(json.dumps(state)) == state


def test_session_start_runs_and_takes_attempt() -> None:
    state = run(("session_start", {"attempt": 2}))
    assert (state["status"], state["attempt"], state["seq"]) == ("running", 2, 1)
    assert run(("session_start", {}))["attempt"] == 0


def test_user_message_adds_item_and_pending_input() -> None:
    state = run(
        ("user_message", {"text": "hi", "delivery": "start", "client_request_id": "r1"}),
        ("user_message", {"text": "more", "delivery": "queue"}),
    )
    assert state["items"] == [
        {"kind": "user", "seq": 1, "text": "hi", "delivery": "start", "client_request_id": "r1"},
        {"kind": "user", "seq": 2, "text": "more", "delivery": "queue"},
    ]
    assert state["pending_inputs"] == [
        {"seq": 1, "text": "hi", "delivery": "start"},
        {"seq": 2, "text": "more", "delivery": "queue"},
    ]
    assert state["status"] == "queued"


def test_turn_start_consumes_the_inputs_it_names_and_opens_a_message() -> None:
    state = run(
        ("user_message", {"text": "hi", "delivery": "start"}),
        ("session_start", {"attempt": 1}),
        ("turn_start", {"turn": 1, "message_id": "m1", "inputs": [1], "inputs_through": 1}),
        ("user_message", {"text": "steer", "delivery": "steer"}),
    )
    assert state["pending_inputs"] == [{"seq": 4, "text": "steer", "delivery": "steer"}]
    assert state["items"][1] == {
        "kind": "assistant",
        "message_id": "m1",
        "text": "",
        "thinking": "",
        "status": "streaming",
    }
    state = apply(state, "turn_start", 5, {"turn": 2, "message_id": "m2", "inputs": [4]})
    assert state["pending_inputs"] == []
    assert [i.get("message_id") for i in state["items"]] == [None, "m1", None, "m2"]


def test_deltas_append_and_message_end_is_authoritative() -> None:
    state = run(
        ("turn_start", {"turn": 1, "message_id": "m"}),
        ("thinking_delta", {"message_id": "m", "text": "hmm "}),
        ("thinking_delta", {"message_id": "m", "text": "ok"}),
        ("text_delta", {"message_id": "m", "text": "Hel"}),
        ("text_delta", {"message_id": "m", "text": "lo"}),
    )
    (msg,) = state["items"]
    assert (msg["text"], msg["thinking"], msg["status"]) == ("Hello", "hmm ok", "streaming")
    usage = {"input_tokens": 3, "output_tokens": 2}
    state = apply(
        state,
        "message_end",
        6,
        {"message_id": "m", "text": "Hello!", "stop_reason": "end_turn", "usage": usage},
    )
    assert state["items"] == [
        {
            "kind": "assistant",
            "message_id": "m",
            "text": "Hello!",
            "thinking": "hmm ok",
            "status": "complete",
            "stop_reason": "end_turn",
            "usage": usage,
        }
    ]


def test_delta_for_unknown_message_creates_it() -> None:
    state = run(("text_delta", {"message_id": "x", "text": "a"}))
    assert state["items"] == [
        {"kind": "assistant", "message_id": "x", "text": "a", "thinking": "", "status": "streaming"}
    ]
    state = run(("thinking_delta", {"message_id": "y", "text": "t"}))
    assert state["items"][0]["thinking"] == "t"


@pytest.mark.parametrize(
    ("stop_reason", "status"),
    [
        ("end_turn", "complete"),
        ("tool_use", "complete"),
        ("length", "complete"),
        ("cancelled", "cancelled"),
        ("interrupted", "interrupted"),
    ],
)
def test_message_end_status_follows_stop_reason(stop_reason: str, status: str) -> None:
    state = run(
        ("text_delta", {"message_id": "m", "text": "part"}),
        ("message_end", {"message_id": "m", "text": "part", "stop_reason": stop_reason}),
    )
    assert state["items"][0]["status"] == status
    assert state["items"][0]["stop_reason"] == stop_reason
    assert "usage" not in state["items"][0]


def test_delta_after_message_end_does_not_change_settled_text() -> None:
    state = run(
        ("message_end", {"message_id": "m", "text": "done", "stop_reason": "end_turn"}),
        ("text_delta", {"message_id": "m", "text": "late"}),
    )
    assert state["items"][0]["text"] == "done"


def test_turn_start_for_known_message_restarts_it_in_place() -> None:
    state = run(
        ("turn_start", {"turn": 1, "message_id": "m"}),
        ("text_delta", {"message_id": "m", "text": "dead worker's half"}),
        ("session_resumed", {"reason": "crash", "attempt": 2, "repaired_tool_calls": []}),
        ("turn_start", {"turn": 1, "message_id": "m"}),
        ("text_delta", {"message_id": "m", "text": "fresh"}),
    )
    messages = [i for i in state["items"] if i["kind"] == "assistant"]
    assert messages == [
        {
            "kind": "assistant",
            "message_id": "m",
            "text": "fresh",
            "thinking": "",
            "status": "streaming",
        }
    ]


def test_tool_lifecycle() -> None:
    state = run(
        ("tool_start", {"call_id": "c1", "tool": "search", "arguments": {"q": "x"}}),
        ("tool_progress", {"call_id": "c1", "message": "10%"}),
        ("tool_progress", {"call_id": "c1", "message": "90%"}),
    )
    assert state["items"] == [
        {
            "kind": "tool",
            "call_id": "c1",
            "tool": "search",
            "arguments": {"q": "x"},
            "status": "running",
            "progress": ["10%", "90%"],
        }
    ]
    done = apply(
        state, "tool_end", 4, {"call_id": "c1", "ok": True, "result": [1], "duration_ms": 7}
    )
    assert done["items"][0] | {} == state["items"][0] | {
        "status": "done",
        "result": [1],
        "duration_ms": 7,
    }
    failed = apply(state, "tool_end", 4, {"call_id": "c1", "ok": False, "error": "boom"})
    assert (failed["items"][0]["status"], failed["items"][0]["error"]) == ("error", "boom")
    assert "result" not in failed["items"][0]
    cut = apply(
        state,
        "tool_end",
        4,
        {"call_id": "c1", "ok": False, "error": "interrupted", "interrupted": True},
    )
    assert cut["items"][0]["status"] == "interrupted"


def test_tool_end_for_unknown_call_creates_the_card() -> None:
    state = run(
        ("tool_end", {"call_id": "c9", "ok": False, "error": "interrupted", "interrupted": True})
    )
    assert state["items"] == [
        {
            "kind": "tool",
            "call_id": "c9",
            "tool": None,
            "arguments": {},
            "status": "interrupted",
            "progress": [],
            "error": "interrupted",
        }
    ]


def test_tool_rerun_with_same_call_id_reuses_the_card() -> None:
    state = run(
        ("tool_start", {"call_id": "c", "tool": "fetch", "arguments": {}}),
        ("tool_end", {"call_id": "c", "ok": False, "error": "x", "duration_ms": 1}),
        ("tool_start", {"call_id": "c", "tool": "fetch", "arguments": {"n": 2}}),
    )
    (card,) = state["items"]
    assert card["status"] == "running"
    assert card["arguments"] == {"n": 2}
    assert "error" not in card and "duration_ms" not in card


def test_question_is_open_until_next_user_message() -> None:
    state = run(("user_question", {"question": "Which?", "options": ["a", "b"]}))
    assert state["question"] == {"question": "Which?", "options": ["a", "b"]}
    assert state["items"] == [
        {"kind": "question", "seq": 1, "question": "Which?", "options": ["a", "b"]}
    ]
    state = apply(state, "user_message", 2, {"text": "a", "delivery": "steer"})
    assert state["question"] is None
    assert len(state["items"]) == 2


def test_stage_and_title() -> None:
    state = run(("stage", {"stage": "research"}), ("title", {"title": "Trip"}))
    assert (state["stage"], state["title"]) == ("research", "Trip")


def test_resumed_interrupted_incomplete_error_markers() -> None:
    state = run(
        ("session_start", {"attempt": 1}),
        ("session_interrupted", {"reason": "shutdown", "attempt": 1}),
        ("session_resumed", {"reason": "handoff", "repaired_tool_calls": ["c1"]}),
        ("incomplete", {"reason": "max_turns"}),
        ("error", {"code": "provider_error", "message": "503"}),
    )
    assert state["status"] == "running"
    assert state["resumed"] == [{"seq": 3, "reason": "handoff", "repaired_tool_calls": ["c1"]}]
    assert state["incomplete"] == {"reason": "max_turns"}
    assert state["items"] == [
        {
            "kind": "marker",
            "seq": 2,
            "type": "interrupted",
            "data": {"reason": "shutdown", "attempt": 1},
        },
        {
            "kind": "marker",
            "seq": 3,
            "type": "resumed",
            "data": {"reason": "handoff", "repaired_tool_calls": ["c1"]},
        },
        {"kind": "marker", "seq": 4, "type": "incomplete", "data": {"reason": "max_turns"}},
        {
            "kind": "marker",
            "seq": 5,
            "type": "error",
            "data": {"code": "provider_error", "message": "503"},
        },
    ]


COMPACTED = {"method": "summary", "reason": "threshold", "through_entry": 9,
             "covered_entries": 6, "trimmed": 1, "tokens_before": 2950, "tokens_after": 610,
             "window": 3000, "first_seq": 1, "last_seq": 7, "route": "demo:scripted",
             "summary": "The user asked for a plan; the agent drafted one."}


def test_context_compacted_is_a_divider_where_it_happened_and_changes_no_item() -> None:
    before = run(
        ("user_message", {"text": "plan it", "delivery": "start"}),
        ("session_start", {"attempt": 1}),
        ("turn_start", {"turn": 1, "message_id": "m1", "inputs": [1]}),
        ("message_end", {"message_id": "m1", "text": "Here", "stop_reason": "end_turn"}),
    )
    state = fold([("context_compacted", 5, COMPACTED),
                  ("turn_start", 6, {"turn": 2, "message_id": "m2"})], before)
    assert state["items"][: len(before["items"])] == before["items"]
    assert state["items"][len(before["items"])] == {
        "kind": "marker", "seq": 5, "type": "compacted", "data": COMPACTED}
    assert state["items"][-1]["message_id"] == "m2"
    assert (state["status"], state["attention"]) == (before["status"], before["attention"])


def test_resumed_takes_attempt_and_closes_the_dead_runs_items() -> None:
    state = run(
        ("session_start", {"attempt": 1}),
        ("text_delta", {"message_id": "m", "text": "x"}),
        ("tool_start", {"call_id": "c", "tool": "t", "arguments": {}}),
        ("session_resumed", {"reason": "crash", "attempt": 2, "repaired_tool_calls": []}),
    )
    assert state["attempt"] == 2
    assert [i.get("status") for i in state["items"]] == ["interrupted", "interrupted", None]


def test_session_interrupted_leaves_status_running() -> None:
    state = run(("session_start", {}), ("session_interrupted", {"reason": "shutdown"}))
    assert state["status"] == "running"


@pytest.mark.parametrize(
    ("status", "message_status"),
    [("succeeded", "interrupted"), ("failed", "interrupted"), ("cancelled", "cancelled")],
)
def test_session_end_settles_and_closes_open_items(status: str, message_status: str) -> None:
    error = None if status == "succeeded" else {"code": "c", "message": "m"}
    state = run(
        ("session_start", {"attempt": 1}),
        ("text_delta", {"message_id": "open", "text": "x"}),
        ("message_end", {"message_id": "done", "text": "y", "stop_reason": "end_turn"}),
        ("tool_start", {"call_id": "c1", "tool": "t", "arguments": {}}),
        ("tool_end", {"call_id": "c2", "ok": True, "result": 1}),
        ("session_end", {"status": status, "error": error}),
    )
    assert state["status"] == status
    assert state["error"] == error
    assert [i["status"] for i in state["items"]] == [
        message_status,
        "complete",
        "interrupted",
        "done",
    ]


def test_session_end_with_bad_status_is_never_a_success() -> None:
    assert run(("session_end", {"status": "running"}))["status"] == "failed"
    assert run(("session_end", {}))["status"] == "failed"


def test_user_message_revives_terminal_session() -> None:
    state = run(
        ("session_start", {"attempt": 3}),
        ("incomplete", {"reason": "max_turns"}),
        ("session_end", {"status": "failed", "error": {"code": "incomplete", "message": "m"}}),
        ("user_message", {"text": "again", "delivery": "start"}),
    )
    assert state["status"] == "queued"
    assert (state["attempt"], state["error"], state["incomplete"]) == (0, None, None)
    assert state["pending_inputs"] == [{"seq": 4, "text": "again", "delivery": "start"}]


def test_user_message_while_running_keeps_running() -> None:
    state = run(("session_start", {}), ("user_message", {"text": "x", "delivery": "steer"}))
    assert state["status"] == "running"


def test_unknown_event_only_advances_seq() -> None:
    before = run(("title", {"title": "t"}))
    after = apply(before, "something_new", 2, {"x": 1})
    assert after == before | {"seq": 2}


def test_old_events_are_ignored() -> None:
    state = run(
        ("turn_start", {"message_id": "m"}), ("text_delta", {"message_id": "m", "text": "a"})
    )
    assert apply(state, "text_delta", 2, {"message_id": "m", "text": "a"}) == state
    assert apply(state, "text_delta", 1, {"message_id": "m", "text": "zzz"}) == state
    assert fold([("text_delta", 2, {"message_id": "m", "text": "a"})], state) == state


def test_fold_accepts_event_objects() -> None:
    ts = datetime(2024, 1, 1, tzinfo=UTC)
    events = [
        Event("s", 1, ts, 1, 1, "turn_start", {"turn": 1, "message_id": "m"}),
        Event("s", 2, ts, 1, 1, "text_delta", {"message_id": "m", "text": "hi"}),
    ]
    assert fold(events) == fold([(e.type, e.seq, e.data) for e in events])
    assert fold(events)["items"][0]["text"] == "hi"


def test_state_from_another_reducer_version_is_refused() -> None:
    stale = empty_state() | {"version": 0}
    with pytest.raises(ValueError, match="refold"):
        apply(stale, "title", 1, {"title": "x"})
    with pytest.raises(ValueError, match="refold"):
        fold([], stale)


def test_state_does_not_alias_event_payloads() -> None:
    arguments = {"q": ["x"]}
    state = run(("tool_start", {"call_id": "c", "tool": "t", "arguments": arguments}))
    arguments["q"].append("y")
    assert state["items"][0]["arguments"] == {"q": ["x"]}


def test_apply_shares_untouched_items() -> None:
    state = run(
        ("user_message", {"text": "hi", "delivery": "start"}),
        ("turn_start", {"turn": 1, "message_id": "m"}),
    )
    after = apply(state, "text_delta", 3, {"message_id": "m", "text": "x"})
    assert after["items"][0] is state["items"][0]
    assert after["items"][1] is not state["items"][1]
    assert state["items"][1]["text"] == ""


def test_folding_100k_deltas_is_fast() -> None:
    events: list[Ev] = [("turn_start", 1, {"turn": 1, "message_id": "m"})]
    events += [
        ("text_delta", n, {"message_id": "m", "text": "0123456789"}) for n in range(2, 100_002)
    ]
    start = time.perf_counter()
    state = fold(events)
    elapsed = time.perf_counter() - start
    assert len(state["items"][0]["text"]) == 1_000_000
    assert elapsed < 2.0, f"folding 100k deltas took {elapsed:.2f}s"


# ---- invariants over generated sessions ---------------------------------------------------

MESSAGE_IDS = st.sampled_from(["m1", "m2", "m3", "m4"])
CALL_IDS = st.sampled_from(["c1", "c2", "c3"])
SHORT_TEXT = st.text(max_size=6)
STOP_REASONS = st.sampled_from(["end_turn", "tool_use", "length", "cancelled", "interrupted"])
JSON_LEAF = st.none() | st.booleans() | st.integers(-5, 5) | SHORT_TEXT
JSON_VALUE = st.recursive(
    JSON_LEAF,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(SHORT_TEXT, inner, max_size=3),
    max_leaves=6,
)

Step = tuple[str, dict[str, Any]]


@st.composite
def turn(draw: st.DrawFn) -> list[Step]:
    message_id = draw(MESSAGE_IDS)
    steps: list[Step] = []
    if draw(st.booleans()):
        steps.append(("turn_start", {"turn": draw(st.integers(1, 5)), "message_id": message_id}))
    deltas = draw(
        st.lists(
            st.tuples(st.sampled_from(["text_delta", "thinking_delta"]), SHORT_TEXT), max_size=5
        )
    )
    steps += [(kind, {"message_id": message_id, "text": text}) for kind, text in deltas]
    if draw(st.booleans()):
        end: dict[str, Any] = {
            "message_id": message_id,
            "text": "".join(t for k, t in deltas if k == "text_delta") + draw(SHORT_TEXT),
            "stop_reason": draw(STOP_REASONS),
        }
        if draw(st.booleans()):
            end["usage"] = {"input_tokens": draw(st.integers(0, 9)), "output_tokens": 1}
        steps.append(("message_end", end))
    return steps


@st.composite
def tool_call(draw: st.DrawFn) -> list[Step]:
    call_id = draw(CALL_IDS)
    steps: list[Step] = []
    if draw(st.integers(0, 3)):
        steps.append(
            ("tool_start", {"call_id": call_id, "tool": "t", "arguments": draw(JSON_VALUE)})
        )
    steps += [
        ("tool_progress", {"call_id": call_id, "message": m})
        for m in draw(st.lists(SHORT_TEXT, max_size=3))
    ]
    if draw(st.booleans()):
        ok = draw(st.booleans())
        end: dict[str, Any] = {
            "call_id": call_id,
            "ok": ok,
            "duration_ms": draw(st.integers(0, 99)),
        }
        if ok:
            end["result"] = draw(JSON_VALUE)
        else:
            end["error"] = draw(SHORT_TEXT)
            if draw(st.booleans()):
                end["interrupted"] = True
        steps.append(("tool_end", end))
    return steps


def single(
    event_type: str, data: st.SearchStrategy[dict[str, Any]]
) -> st.SearchStrategy[list[Step]]:
    return data.map(lambda d: [(event_type, d)])


BLOCK = st.one_of(
    turn(),
    tool_call(),
    single(
        "user_message",
        st.fixed_dictionaries(
            {
                "text": SHORT_TEXT,
                "delivery": st.sampled_from(["steer", "queue", "interrupt", "start"]),
            },
            optional={"client_request_id": SHORT_TEXT},
        ),
    ),
    single("session_start", st.fixed_dictionaries({}, optional={"attempt": st.integers(0, 5)})),
    single(
        "session_resumed",
        st.fixed_dictionaries(
            {
                "reason": st.sampled_from(["crash", "handoff"]),
                "repaired_tool_calls": st.lists(CALL_IDS, max_size=2),
            },
            optional={"attempt": st.integers(0, 5)},
        ),
    ),
    single(
        "session_interrupted",
        st.fixed_dictionaries({"reason": st.just("shutdown"), "attempt": st.integers(0, 5)}),
    ),
    single(
        "session_end",
        st.fixed_dictionaries(
            {"status": st.sampled_from(["succeeded", "failed", "cancelled"])},
            optional={"error": st.fixed_dictionaries({"code": SHORT_TEXT, "message": SHORT_TEXT})},
        ),
    ),
    single(
        "user_question",
        st.fixed_dictionaries(
            {"question": SHORT_TEXT}, optional={"options": st.lists(SHORT_TEXT, max_size=3)}
        ),
    ),
    single("stage", st.fixed_dictionaries({"stage": st.none() | SHORT_TEXT})),
    single("title", st.fixed_dictionaries({"title": SHORT_TEXT})),
    single(
        "incomplete", st.fixed_dictionaries({"reason": st.sampled_from(["max_turns", "length"])})
    ),
    single("error", st.fixed_dictionaries({"code": SHORT_TEXT, "message": SHORT_TEXT})),
    single("mystery_event", st.dictionaries(SHORT_TEXT, JSON_LEAF, max_size=2)),
)


@st.composite
def sessions(draw: st.DrawFn) -> list[Ev]:
    """A plausible event log: blocks (turns, tool calls, lifecycle events) interleaved by runs."""
    blocks = draw(st.lists(BLOCK, max_size=30))
    steps = [step for block in blocks for step in block]
    # Interleave neighbouring steps now and then, as concurrent tool calls and streams do.
    for i in draw(st.lists(st.integers(0, max(len(steps) - 2, 0)), max_size=4)):
        if i + 1 < len(steps):
            steps[i], steps[i + 1] = steps[i + 1], steps[i]
    return [(t, seq, d) for seq, (t, d) in enumerate(steps, start=1)]


def step_by_step(events: list[Ev]) -> dict[str, Any]:
    state = empty_state()
    for event in events:
        state = apply(state, *event)
    return state


@settings(max_examples=200, deadline=None)
@given(sessions())
def test_fold_is_split_invariant(events: list[Ev]) -> None:
    whole = fold(events)
    for k in range(len(events) + 1):
        head = fold(events[:k])
        assert fold(events[k:], head) == whole


@settings(max_examples=200, deadline=None)
@given(sessions())
def test_apply_agrees_with_fold_and_never_mutates(events: list[Ev]) -> None:
    state = empty_state()
    for event in events:
        before = copy.deepcopy(state)
        data_before = copy.deepcopy(event[2])
        after = apply(state, *event)
        assert state == before
        assert event[2] == data_before
        assert after["seq"] == event[1]
        # Re-applying the event just applied is a no-op (idempotent replay).
        assert apply(after, *event) == after
        state = after
    assert state == fold(events)


@settings(max_examples=200, deadline=None)
@given(sessions(), st.data())
def test_fold_never_mutates_its_start_state(events: list[Ev], data: st.DataObject) -> None:
    k = data.draw(st.integers(0, len(events)))
    head = fold(events[:k])
    before = copy.deepcopy(head)
    fold(events[k:], head)
    assert head == before


@settings(max_examples=200, deadline=None)
@given(sessions(), st.data())
def test_replayed_events_change_nothing(events: list[Ev], data: st.DataObject) -> None:
    """A reconnecting stream may resend events already folded: they must not duplicate text."""
    replayed = list(events)
    for _ in range(data.draw(st.integers(0, 5))):
        if not replayed:
            break
        at = data.draw(st.integers(0, len(replayed) - 1))
        back = data.draw(st.integers(0, at))
        replayed[at + 1 : at + 1] = replayed[back : at + 1]
    assert fold(replayed) == fold(events)
    assert step_by_step(replayed) == fold(events)


@settings(max_examples=200, deadline=None)
@given(sessions())
def test_state_survives_json_round_trip(events: list[Ev]) -> None:
    for k in range(len(events) + 1):
        state = fold(events[:k])
        assert json.loads(json.dumps(state)) == state
    final = fold(events)
    assert fold([], json.loads(json.dumps(final))) == final


@settings(max_examples=100, deadline=None)
@given(sessions())
def test_generated_states_keep_the_documented_shape(events: list[Ev]) -> None:
    state = fold(events)
    assert set(state) == set(empty_state())
    assert state["status"] in {"queued", "running", "succeeded", "failed", "cancelled"}
    seqs = [p["seq"] for p in state["pending_inputs"]]
    assert seqs == sorted(seqs)
    for item in state["items"]:
        if item["kind"] == "assistant":
            assert item["status"] in {"streaming", "complete", "cancelled", "interrupted"}
        elif item["kind"] == "tool":
            assert item["status"] in {"running", "done", "error", "interrupted"}
        else:
            assert item["kind"] in {"user", "question", "marker"}
    if events and events[-1][0] == "session_end":
        assert all(i.get("status") not in {"streaming", "running"} for i in state["items"])


def test_a_queued_message_waits_until_a_turn_names_it() -> None:
    state = run(
        ("user_message", {"text": "hi", "delivery": "start"}),
        ("session_start", {"attempt": 1}),
        ("turn_start", {"turn": 1, "message_id": "m1", "inputs": [1]}),
        ("user_message", {"text": "later", "delivery": "queue"}),
        ("turn_start", {"turn": 2, "message_id": "m2"}),
    )
    assert [p["seq"] for p in state["pending_inputs"]] == [4]
    state = apply(state, "turn_start", 6, {"turn": 3, "message_id": "m3", "inputs": [4]})
    assert state["pending_inputs"] == []


def test_inputs_through_of_older_logs_delivers_up_to_it() -> None:
    state = run(
        ("user_message", {"text": "a", "delivery": "start"}),
        ("user_message", {"text": "b", "delivery": "queue"}),
        ("turn_start", {"turn": 1, "message_id": "m1", "inputs_through": 1}),
    )
    assert [p["seq"] for p in state["pending_inputs"]] == [2]


def test_session_end_drops_the_inputs_it_names() -> None:
    state = run(
        ("user_message", {"text": "a", "delivery": "start"}),
        ("turn_start", {"turn": 1, "message_id": "m1", "inputs": [1]}),
        ("user_message", {"text": "b", "delivery": "queue"}),
        ("user_message", {"text": "c", "delivery": "queue"}),
        ("session_end", {"status": "cancelled", "dropped_inputs": [3]}),
    )
    assert [p["seq"] for p in state["pending_inputs"]] == [4]
    users = [i for i in state["items"] if i["kind"] == "user"]
    assert [u.get("dropped", False) for u in users] == [False, True, False]


def test_attention_is_set_by_the_end_and_cleared_by_the_next_message() -> None:
    state = run(
        ("user_message", {"text": "ask me", "delivery": "start"}),
        ("user_question", {"question": "Which?", "options": ["a", "b"]}),
        ("session_end", {"status": "succeeded", "attention": "question"}),
    )
    assert state["attention"] == "question"
    state = apply(state, "user_message", 4, {"text": "a", "delivery": "start"})
    assert state["attention"] is None and state["question"] is None


def test_approval_items_and_attention() -> None:
    requested = {"approval_id": "a1", "call_id": "c1", "tool": "send_message",
                 "args": {"to": "team"}, "expires_at": "2026-12-01T00:00:00+00:00"}
    state = fold([("session_start", 1, {"attempt": 1}),
                         ("approval_requested", 2, requested)])
    assert state["attention"] == "approval"
    assert state["items"][-1] == {"kind": "approval", "seq": 2, "status": "pending",
                                  **requested}
    approved = fold([("approval_decided", 3, {"approval_id": "a1", "decision": "approve",
                                                     "always": True})], state)
    assert approved["attention"] is None
    assert (approved["items"][-1]["status"], approved["items"][-1]["always"]) == (
        "approved", True)
    expired = fold([("approval_decided", 3, {"approval_id": "a1", "decision": "deny",
                                                    "reason": "expired"})], state)
    assert (expired["items"][-1]["status"], expired["items"][-1]["reason"]) == (
        "expired", "expired")
    denied = fold([("approval_decided", 3, {"approval_id": "a1", "decision": "deny",
                                                   "reason": "no"})], state)
    assert denied["items"][-1]["status"] == "denied"
    ended = fold([("session_end", 3, {"status": "cancelled"})], state)
    assert ended["items"][-1]["status"] == "cancelled" and ended["attention"] is None


def test_client_tool_items_and_attention() -> None:
    called = {"call_id": "c1", "name": "get_weather", "args": {"city": "Oslo"},
              "expires_at": None, "last": True}
    state = fold([("session_start", 1, {"attempt": 1}), ("client_tool_call", 2, called)])
    assert state["attention"] == "tool"
    assert state["items"][-1] == {"kind": "client_tool", "seq": 2, "call_id": "c1",
                                  "name": "get_weather", "args": {"city": "Oslo"},
                                  "expires_at": None, "status": "pending"}
    # The same call again (a re-read log) is still one item.
    assert fold([("client_tool_call", 2, called)], state)["items"] == state["items"]
    answered = fold([("client_tool_result", 3, {"call_id": "c1", "name": "get_weather",
                                                "ok": True, "resumed": True})], state)
    assert (answered["items"][-1]["status"], answered["attention"]) == ("answered", None)
    assert answered["items"][-1]["resumed_seq"] == 3
    failed = fold([("client_tool_result", 3, {"call_id": "c1", "name": "get_weather",
                                              "ok": False})], state)
    assert (failed["items"][-1]["status"], failed["attention"]) == ("failed", "tool")
    assert "resumed_seq" not in failed["items"][-1]
    expired = fold([("client_tool_result", 3, {"call_id": "c1", "name": "get_weather",
                                               "ok": False, "reason": "expired",
                                               "resumed": True})], state)
    assert expired["items"][-1]["status"] == "expired"
    ended = fold([("session_end", 3, {"status": "cancelled"})], state)
    assert ended["items"][-1]["status"] == "cancelled" and ended["attention"] is None
    # A result whose call the log lacks (a log read from the middle) is an item of its own.
    alone = fold([("client_tool_result", 5, {"call_id": "c9", "name": "x", "ok": True})])
    assert alone["items"][-1]["status"] == "answered"
