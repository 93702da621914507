"""`outlive sessions tail` / `show` text: what a reader sees for each kind of event and item."""

from __future__ import annotations

from outlive.cli.transcript import TranscriptWriter, event_json, item_lines
from outlive.domain.events import parse


def feed_all(events: list[tuple[str, dict[str, object]]]) -> str:
    writer = TranscriptWriter()
    return "".join(writer.feed(parse(t, d)) for t, d in events) + writer.close()


def test_a_run_reads_as_a_transcript() -> None:
    text = feed_all([
        ("session_start", {"attempt": 1}),
        ("user_message", {"text": "run long", "delivery": "steer"}),
        ("turn_start", {"message_id": "m1"}),
        ("thinking_delta", {"message_id": "m1", "text": "Let me "}),
        ("thinking_delta", {"message_id": "m1", "text": "think."}),
        ("text_delta", {"message_id": "m1", "text": "Hello "}),
        ("text_delta", {"message_id": "m1", "text": "world."}),
        ("message_end", {"message_id": "m1", "stop_reason": "tool_calls"}),
        ("tool_start", {"call_id": "c1", "tool": "slow_task", "arguments": {"seconds": 8}}),
        ("tool_progress", {"call_id": "c1", "message": "half way"}),
        ("tool_end", {"call_id": "c1", "ok": True, "duration_ms": 8012}),
        ("tool_start", {"call_id": "c2", "tool": "flaky", "arguments": {}}),
        ("tool_end", {"call_id": "c2", "ok": False, "duration_ms": 3,
                      "error": {"type": "DemoToolError", "message": "failed on purpose"}}),
        ("error", {"code": "provider_error", "message": "overloaded", "retrying": True}),
        ("user_message", {"text": "later", "delivery": "queue"}),
        ("text_delta", {"message_id": "m2", "text": "Cut"}),
        ("message_end", {"message_id": "m2", "stop_reason": "cancelled"}),
        ("session_end", {"status": "cancelled"}),
    ])
    assert text == (
        "> run long\n"
        "(thinking) Let me think.\n"
        "Hello world.\n"
        '  → slow_task {"seconds":8}\n'
        "    … half way\n"
        "  ✓ slow_task in 8.0 s\n"
        "  → flaky {}\n"
        "  ✗ flaky failed in 3 ms: failed on purpose\n"
        "! overloaded (retrying)\n"
        "> later  (queue)\n"
        "Cut\n"
        "[cancelled: partial answer]\n"
        "— session cancelled\n"
    )


def test_questions_list_their_options_and_endings_say_why() -> None:
    assert feed_all([("user_question", {"question": "Which?", "options": ["a", "b"]})]) == (
        "? Which?\n  1. a\n  2. b\n")
    assert feed_all([("session_end", {"status": "failed",
                                      "error": {"code": "x", "message": "boom"}})]) == (
        "— session failed: boom\n")
    assert feed_all([("text_delta", {"text": "so"}), ("message_end", {"stop_reason": "length"}),
                     ("incomplete", {"reason": "length"})]) == (
        "so\n[cut at the length limit]\n— incomplete: length\n")
    assert feed_all([("session_resumed", {"reason": "crash", "attempt": 2}),
                     ("session_interrupted", {"reason": "shutdown"}),
                     ("title", {"title": "Plans"}),
                     ("approval_requested", {"approval_id": "apv_1", "tool": "rm",
                                             "args": {"path": "/"}}),
                     ("approval_decided", {"decision": "deny", "reason": "expired"}),
                     ("approval_decided", {"decision": "approve"}),
                     ("from_the_future", {"x": 1})]) == (
        "— resumed after crash (attempt 2)\n— interrupted (shutdown)\n— title: Plans\n"
        '? approve rm {"path":"/"}\n  outlive sessions approve|deny SESSION apv_1\n'
        "  expired: nobody decided in time\n  approved\n")
    assert event_json(3, "2026-01-01T00:00:00Z", "title", {"title": "é"}) == (
        '{"seq":3,"ts":"2026-01-01T00:00:00Z","type":"title","data":{"title":"é"}}')


def test_snapshot_items() -> None:
    assert item_lines({"kind": "user", "text": "hi", "delivery": "steer"}) == ["> hi"]
    assert item_lines({"kind": "assistant", "text": "Par", "thinking": "",
                       "status": "cancelled", "stop_reason": "cancelled"}) == [
        "Par", "[cancelled: partial answer]"]
    assert item_lines({"kind": "assistant", "text": "Done.", "thinking": "",
                       "status": "complete", "stop_reason": "stop"}) == ["Done."]
    assert item_lines({"kind": "assistant", "text": "Half", "thinking": "",
                       "status": "interrupted"}) == ["Half", "[interrupted: partial answer]"]
    assert item_lines({"kind": "tool", "tool": "slow_task", "arguments": {"seconds": 8},
                       "status": "interrupted", "progress": ["step 3 of 8"],
                       "duration_ms": 2500}) == [
        '  → slow_task {"seconds":8}', "    … step 3 of 8", "  ✗ slow_task interrupted in 2.5 s"]
    assert item_lines({"kind": "question", "question": "Which?", "options": ["x"]}) == [
        "? Which?", "  1. x"]
    assert item_lines({"kind": "marker", "type": "resumed", "data": {"reason": "crash"}}) == [
        "— resumed after crash"]
    assert item_lines({"kind": "marker", "type": "resumed",
                       "data": {"reason": "approval", "attempt": 1}}) == [
        "— continued after your decision"]
    assert feed_all([("session_resumed", {"reason": "approval", "attempt": 1,
                                          "repaired_tool_calls": []})]) == (
        "— continued after your decision\n")
    assert item_lines({"kind": "marker", "type": "error",
                       "data": {"code": "provider_error", "message": "slow", "retrying": True}}
                      ) == ["! slow (retrying)"]
    assert item_lines({"kind": "marker", "type": "interrupted", "data": {}}) == [
        "— interrupted (stopped)"]


SUMMARY = {"method": "summary", "reason": "threshold", "through_entry": 40,
           "covered_entries": 42, "trimmed": 0, "tokens_before": 2950, "tokens_after": 610,
           "window": 3000, "first_seq": 1, "last_seq": 77, "route": "demo:scripted",
           "summary": "The user plans a trip.\n- Lisbon first"}


def test_a_compaction_is_a_divider_and_show_prints_its_summary() -> None:
    divider = "── earlier context summarized (42 entries, 2,950 → 610 tokens of 3,000) ──"
    assert feed_all([("text_delta", {"text": "so"}), ("context_compacted", SUMMARY)]) == (
        f"so\n{divider}\n")
    assert item_lines({"kind": "marker", "type": "compacted", "seq": 80, "data": SUMMARY}) == [
        divider, "  The user plans a trip.", "  - Lisbon first"]
    trim = {**SUMMARY, "method": "trim", "covered_entries": 0, "trimmed": 1, "summary": None,
            "window": None, "tokens_after": 2100}
    assert feed_all([("context_compacted", trim)]) == (
        "── old tool results trimmed (1 tool result, 2,950 → 2,100 tokens) ──\n")
    cut = {**SUMMARY, "method": "truncation", "covered_entries": 1, "summary": None,
           "error": "the summarizer answered with nothing"}
    assert item_lines({"kind": "marker", "type": "compacted", "data": cut}) == [
        "── earlier messages left out of the model's view (1 entry, 2,950 → 610 tokens of "
        "3,000) ──", "  the summarizer failed: the summarizer answered with nothing"]


def test_show_reads_each_answer_once() -> None:
    """`sessions show` of real logs (tests/fixtures/logs_v1): the provider retries' empty
    attempts say nothing, and the answer a crash cut off and the next worker wrote again is
    one line, so its opening is not read twice."""
    from outlive.cli.transcript import transcript_lines
    from outlive.domain.reducer import fold
    from tests.support.logs_v1 import LOGS, load

    retried, _ = load(LOGS / "provider_error.json")
    lines = transcript_lines(fold(retried)["items"])
    assert not [line for line in lines if line.startswith("[interrupted")]
    crashed, _ = load(LOGS / "crash_text.json")
    items = fold(crashed)["items"]
    lines = transcript_lines(items)
    first = next(i for i in items if i["kind"] == "assistant")
    assert first["status"] == "interrupted" and first["text"]
    assert lines.count("[interrupted: written again below]") == 1
    assert first["text"] not in lines
    # an answer cut off with nothing after it keeps its text
    assert transcript_lines([first]) == [first["text"], "[interrupted: partial answer]"]


DELEGATION = [
    ("tool_start", {"call_id": "a", "tool": "agent__helper", "arguments": {"task": "Find it"}}),
    ("tool_start", {"call_id": "b", "tool": "agent__helper", "arguments": {"task": "Say it"}}),
    ("child_started", {"call_id": "a", "child_id": "ses_A", "agent": "helper"}),
    ("child_started", {"call_id": "b", "child_id": "ses_B", "agent": "helper"}),
    ("child_ended", {"call_id": "a", "child_id": "ses_A", "status": "succeeded"}),
    ("child_ended", {"call_id": "b", "child_id": "ses_B", "status": "failed"}),
    ("session_resumed", {"reason": "children", "attempt": 1}),
    ("tool_end", {"call_id": "a", "ok": True, "duration_ms": 10400,
                  "result": {"child_id": "ses_A", "agent": "helper", "answer": "42"}}),
    ("tool_end", {"call_id": "b", "ok": False, "duration_ms": 900,
                  "error": {"message": "sub-agent helper failed: boom",
                            "value": {"child_id": "ses_B", "agent": "helper",
                                      "status": "failed"}}}),
]


def test_tail_names_a_delegation_calls_child_and_its_end() -> None:
    assert feed_all(DELEGATION) == (
        '  → agent__helper {"task":"Find it"}\n'
        '  → agent__helper {"task":"Say it"}\n'
        "    ↳ sub-agent helper started: ses_A (outlive sessions tail ses_A)\n"
        "    ↳ sub-agent helper started: ses_B (outlive sessions tail ses_B)\n"
        "    ↳ sub-agent ses_A succeeded\n"
        "    ↳ sub-agent ses_B failed\n"
        "— continued with its sub-agents' results (attempt 1)\n"
        "  ✓ agent__helper in 10.4 s (sub-agent ses_A succeeded)\n"
        "  ✗ agent__helper failed in 900 ms: sub-agent helper failed: boom"
        " (sub-agent ses_B failed)\n"
    )
    detached = feed_all([
        ("tool_start", {"call_id": "d", "tool": "agent__helper",
                        "arguments": {"task": "Later", "detach": True}}),
        ("tool_end", {"call_id": "d", "ok": True, "duration_ms": 4,
                      "result": {"child_id": "ses_D", "agent": "helper", "detached": True}}),
        ("tool_start", {"call_id": "r", "tool": "agent__helper", "arguments": {}}),
        ("tool_end", {"call_id": "r", "ok": False, "duration_ms": 0,
                      "error": {"message": "cannot delegate: sub-agents may go 3 levels"}}),
    ])
    assert "  ✓ agent__helper in 4 ms (sub-agent ses_D detached)\n" in detached
    assert detached.endswith("  ✗ agent__helper failed in 0 ms: cannot delegate: sub-agents "
                             "may go 3 levels\n")  # refused: no child to name


def test_show_puts_each_childs_id_and_status_under_its_call() -> None:
    from outlive.cli.transcript import transcript_lines
    from outlive.domain.reducer import fold

    running = fold([(t, i, d) for i, (t, d) in enumerate(DELEGATION[:5], 1)])
    lines = transcript_lines(running["items"])
    assert lines == [
        '  → agent__helper {"task":"Find it"}', "    ↳ sub-agent helper ses_A: succeeded",
        "  … agent__helper running",
        '  → agent__helper {"task":"Say it"}', "    ↳ sub-agent helper ses_B: started",
        "  … agent__helper running",
    ]
    # The caller's current words for the children win over what the log said.
    live = transcript_lines(running["items"], {"ses_B": "waiting for you"})
    assert "    ↳ sub-agent helper ses_B: waiting for you" in live
    done = fold([(t, i, d) for i, (t, d) in enumerate(DELEGATION, 1)])
    lines = transcript_lines(done["items"])
    assert "    ↳ sub-agent helper ses_B: failed" in lines
    assert "  ✗ agent__helper failed in 900 ms: sub-agent helper failed: boom" in lines
    assert "— continued with its sub-agents' results" in lines


def test_a_session_tree_is_indented_under_its_root() -> None:
    from outlive.cli.session_tree import TreeNode, tree_lines

    root = TreeNode("ses_R", "demo", "running", "Plan  the\ntrip", [
        TreeNode("ses_B", "helper", "succeeded", "Find trains",
                 [TreeNode("ses_D", "helper", "failed")]),
        TreeNode("ses_C", "helper", "waiting for you", None, more=True),
    ])
    assert tree_lines(root) == [
        "ses_R  demo  running  Plan the trip",
        "├─ ses_B  helper  succeeded  Find trains",
        "│  └─ ses_D  helper  failed",
        "└─ ses_C  helper  waiting for you",
        "   └─ …",
    ]
    assert tree_lines(TreeNode("ses_X", "demo", "queued")) == ["ses_X  demo  queued"]


def test_a_client_tool_call_says_what_it_waits_for() -> None:
    call = {"call_id": "c1", "name": "get_weather", "args": {"city": "Oslo"}}
    waiting = ['? client tool get_weather {"city":"Oslo"}',
               '  waiting for its client: POST /v1/sessions/SESSION/tool-results '
               '{"call_id": "c1", "output": …}']
    assert feed_all([("client_tool_call", call),
                     ("client_tool_result", {"call_id": "c1", "name": "get_weather",
                                             "ok": True, "resumed": True})]) == (
        "\n".join(waiting) + "\n  answered by its client\n")
    assert item_lines({"kind": "client_tool", "status": "pending", **call}) == waiting
    assert item_lines({"kind": "client_tool", "status": "expired", **call}) == [
        waiting[0], "  expired: nobody answered in time"]


def test_a_fork_marker_names_its_origin() -> None:
    assert feed_all([("forked", {"from_session_id": "ses_P", "from_seq": 12, "kind": "edit"}),
                     ("user_message", {"text": "again", "delivery": "start"})]).startswith(
        "── forked from ses_P at event 12 ──\n")
