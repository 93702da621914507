"""The model's view of a long history (domain.context) and its rendering (runtime.history)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from outlive.domain.context import (
    SUMMARY_KIND,
    ContextView,
    Window,
    known_window,
    parse_overflow,
    plan_compaction,
    summary_data,
    valid_cuts,
    view_of,
)
from outlive.runtime.history import SUMMARY_HEADER, model_messages


@dataclass(frozen=True)
class E:
    seq: int
    kind: str
    data: dict[str, Any]


class History:
    def __init__(self) -> None:
        self.entries: list[E] = []

    def add(self, kind: str, **data: Any) -> E:
        e = E(len(self.entries) + 1, kind, data)
        self.entries.append(e)
        return e

    def user(self, text: str) -> E:
        return self.add("user", text=text, seq=100 + len(self.entries))

    def answer(self, text: str, calls: list[str] = (), status: str = "complete") -> E:  # type: ignore[assignment]
        return self.add("assistant", text=text, status=status, stop_reason="stop",
                        tool_calls=[{"call_id": c, "name": "t", "arguments": {}} for c in calls])

    def result(self, call_id: str, body: Any = "ok") -> E:
        return self.add("tool_result", call_id=call_id, name="t", ok=True, result=body)


def turns(n: int, size: int = 400) -> History:
    h = History()
    for i in range(n):
        h.user(f"question {i} " + "x" * size)
        h.answer(f"answer {i} " + "y" * size)
    return h


def test_known_windows_and_the_default_reserve() -> None:
    assert known_window("gpt-4o-mini") == 128_000
    assert known_window("gpt-4.1-nano") == 1_047_576
    assert known_window("claude-sonnet-4-5") == 200_000
    assert known_window("my-finetune") is None
    w = Window.of(3000)
    assert (w.size, w.reserve) == (3000, 375)
    assert Window.of(3000, max_tokens=500).reserve == 500
    assert Window.of(200_000).reserve == 4096
    assert not w.over(2000) and w.over(2500)


@pytest.mark.parametrize(("message", "window", "requested"), [
    ("openai error 400: This model's maximum context length is 3000 tokens. However, your "
     "messages resulted in 3192 tokens. Please reduce the length of the messages.", 3000, 3192),
    ("This model's maximum context length is 4096 tokens. However, you requested 5000 tokens "
     "(4000 in the messages, 1000 in the completion).", 4096, 5000),
    ("anthropic error 400: prompt is too long: 201234 tokens > 200000 maximum", 200000, 201234),
    ("input length and `max_tokens` exceed context limit: 188240 + 21333 > 200000", 200000,
     209573),
    ("request (4711 tokens) exceeds the available context size (4096 tokens), try increasing "
     "it", 4096, 4711),
    ("the request exceeds the available context size, try increasing it", None, None),
    ("Requested tokens (9000) exceed context window of 8192", 8192, 9000),
])
def test_each_providers_refusal_is_recognised(message: str, window: int | None,
                                              requested: int | None) -> None:
    found = parse_overflow(message)
    assert found is not None
    assert (found.window, found.requested) == (window, requested)


def test_other_errors_are_not_overflows() -> None:
    assert parse_overflow("Invalid API key") is None
    assert parse_overflow("rate limit exceeded, retry in 3s") is None


def test_cuts_never_split_a_call_from_its_result_nor_pass_the_newest_user_message() -> None:
    h = History()
    h.user("a")
    h.answer("", ["c1", "c2"])       # 2: parallel calls
    h.result("c1")                   # 3
    h.result("c2")                   # 4
    h.answer("done")                 # 5
    h.user("b")                      # 6
    h.answer("", ["c3"])             # 7: unanswered (waits on an approval)
    cuts = valid_cuts(view_of(h.entries).entries)
    # before the answer after the results (4), before the newest user message (5); never
    # between a message and its answer (1), inside the pair (2, 3) or past the newest message
    assert cuts == [4, 5]
    h2 = History()
    h2.user("a")
    h2.answer("", ["c1"])
    assert valid_cuts(h2.entries) == []


@st.composite
def histories(draw: st.DrawFn) -> list[E]:
    h = History()
    n = 0
    for _ in range(draw(st.integers(1, 12))):
        h.user("u" * draw(st.integers(0, 300)))
        for _ in range(draw(st.integers(0, 3))):
            calls = [f"c{(n := n + 1)}" for _ in range(draw(st.integers(1, 3)))]
            h.answer("", calls)
            answered = calls if draw(st.booleans()) else calls[:-1]
            for c in answered:
                h.result(c, "r" * draw(st.integers(0, 2000)))
            if len(answered) < len(calls):
                return h.entries
        h.answer("a" * draw(st.integers(0, 300)))
    return h.entries


@settings(max_examples=200, deadline=None)
@given(histories(), st.integers(300, 6000), st.booleans())
def test_no_plan_ever_separates_a_pair_or_covers_the_newest_message(
    entries: list[E], size: int, force: bool
) -> None:
    view = view_of(entries)
    plan = plan_compaction(view, fixed=50, window=Window.of(size), summary_budget=100,
                           force=force)
    covered = plan.covered
    assert len(covered) == plan.cut
    calls = {c["call_id"] for e in covered if e.kind == "assistant"
             for c in e.data["tool_calls"]}
    results = {e.data["call_id"] for e in covered if e.kind == "tool_result"}
    assert calls == results
    newest_user = max(e.seq for e in entries if e.kind == "user")
    assert all(e.seq < newest_user for e in covered)
    assert all(e.kind == "tool_result" for e in view.entries if e.seq in plan.trim)


def test_trimming_old_tool_results_comes_before_summarizing() -> None:
    h = History()
    h.user("read the files")
    for i in range(4):
        h.answer("", [f"c{i}"])
        h.result(f"c{i}", "z" * 3000)
    h.answer("done")
    h.user("and now?")
    view = view_of(h.entries)
    plan = plan_compaction(view, fixed=50, window=Window.of(3000), summary_budget=200)
    assert plan.cut == 0
    assert plan.trim == {3, 5, 7}  # the newest two answers' results stay whole
    data = summary_data(view, plan, method="trim", text=None, reason="threshold",
                        tokens_before=5000, tokens_after=plan.tokens_after)
    h.add(SUMMARY_KIND, **data)
    later = view_of(h.entries)
    assert later.trimmed == {3, 5, 7} and later.through == 0
    messages = model_messages("sys", h.entries)
    assert sum('"trimmed": true' in m.text for m in messages) == 3
    assert [m.role for m in messages].count("tool") == 4


def test_a_summary_stands_in_for_a_prefix_and_the_newest_one_wins() -> None:
    h = turns(10)
    h.user("the newest question")
    view = view_of(h.entries)
    plan = plan_compaction(view, fixed=50, window=Window.of(3000), summary_budget=200)
    assert plan.cut > 0 and plan.covered[-1].kind == "assistant"  # whole turns
    data = summary_data(view, plan, method="summary", text="S1", reason="threshold",
                        tokens_before=1, tokens_after=1)
    h.add(SUMMARY_KIND, **data)
    v1 = view_of(h.entries)
    assert v1.summary == "S1" and v1.through == plan.covered[-1].seq
    assert v1.entries[0].kind == "user" and v1.entries[-1].data["text"] == "the newest question"
    messages = model_messages("sys", h.entries)
    assert messages[0].role == "system"  # the summary is what the assistant knows
    assert messages[0].text.startswith("sys\n\n" + SUMMARY_HEADER) and "S1" in messages[0].text
    assert messages[1].role == "user" and messages[1].text.startswith("question")
    assert all(m.role != messages[i + 1].role or m.role == "tool"
               for i, m in enumerate(messages[1:-1], start=1))
    # a summary of the summary: the next one covers more, and alone decides the view
    for i in range(10, 20):
        h.answer(f"answer {i} " + "y" * 400)
        h.user(f"question {i + 1} " + "x" * 400)
    v1 = view_of(h.entries)
    plan2 = plan_compaction(v1, fixed=50, window=Window.of(3000), summary_budget=200)
    data2 = summary_data(v1, plan2, method="summary", text="S2", reason="threshold",
                         tokens_before=1, tokens_after=1)
    h.add(SUMMARY_KIND, **data2)
    v2 = view_of(h.entries)
    assert v2.summary == "S2" and v2.through > v1.through
    assert v2.covered == v1.covered + plan2.cut
    assert sum("S1" in m.text for m in model_messages("", h.entries)) == 0


def test_a_summary_before_an_assistant_message_is_its_own_user_message() -> None:
    view = ContextView([E(5, "assistant", {"text": "a", "tool_calls": []})], summary="S",
                       through=4)
    h = [E(5, "assistant", {"text": "a", "tool_calls": [], "status": "complete"}),
         E(6, SUMMARY_KIND, {"through": 4, "text": "S", "covered": 4, "trimmed": []})]
    messages = model_messages("", h)
    assert [m.role for m in messages] == ["user", "assistant"]
    assert view.tokens() > 0


def test_aborted_answers_stay_out_of_the_view() -> None:
    h = History()
    h.user("a")
    h.answer("half", status="interrupted")
    h.user("b")
    assert [e.seq for e in view_of(h.entries).entries] == [1, 3]


def test_a_thousand_turns_stay_inside_the_window_by_summaries_of_summaries() -> None:
    """The planner and the view together, as the runtime uses them: before each call, compact
    when over the threshold; a summary (of the summary so far and the covered turns) is at
    most its budget. The request never passes the window, and only the newest summary is in
    the view."""
    window = Window.of(4096)
    budget = 300
    h = History()
    sizes = []
    summaries = 0
    for i in range(1000):
        h.user(f"question {i} " + "q" * (100 + 37 * i % 400))
        if i % 7 == 3:
            h.answer("", [f"c{i}"])
            h.result(f"c{i}", "r" * (200 + 53 * i % 3000))
        view = view_of(h.entries)
        tokens = 50 + view.tokens()
        if window.over(tokens):
            plan = plan_compaction(view, fixed=50, window=window, summary_budget=budget)
            text = None
            if plan.cut:
                summaries += 1
                text = f"summary {summaries} " + "s" * (budget * 3 - 40)
            h.add(SUMMARY_KIND, **summary_data(
                view, plan, method="summary" if plan.cut else "trim", text=text,
                reason="threshold", tokens_before=tokens, tokens_after=plan.tokens_after))
            view = view_of(h.entries)
            tokens = 50 + view.tokens()
        sizes.append(tokens)
        assert tokens <= window.budget, (i, tokens)
        h.answer(f"answer {i} " + "a" * (150 + 29 * i % 500))
    assert summaries > 50
    assert max(sizes) <= window.budget
    # the replay's history is whole: nothing was removed, only stood in for
    assert sum(e.kind == "user" for e in h.entries) == 1000


def test_an_agents_file_sets_the_context_settings_and_refuses_bad_ones(tmp_path) -> None:
    from outlive.domain.errors import InvalidInput
    from outlive.runtime import AgentRegistry
    from outlive.runtime.agent_file import load_agents_file

    path = tmp_path / "agents.toml"
    path.write_text('[agents.long]\nsystem_prompt = "s"\nmodel = "demo:scripted"\n'
                    'context_window = 8192\noutput_reserve = 1024\ncompact_at = 0.7\n'
                    'summarizer = "openai:gpt-4o-mini"\n')
    registry = AgentRegistry()
    load_agents_file(path, registry)
    agent = registry.get("long")
    assert (agent.context_window, agent.output_reserve, agent.compact_at, agent.summarizer) == (
        8192, 1024, 0.7, "openai:gpt-4o-mini")
    for bad, message in (("context_window = 10", "context_window"),
                         ("compact_at = 2", "compact_at"),
                         ('summarizer = "nope"', "summarizer")):
        path.write_text(f'[agents.x]\nsystem_prompt = "s"\n{bad}\n')
        with pytest.raises(InvalidInput, match=message):
            load_agents_file(path, AgentRegistry())
