"""The demo provider's script, pacing, simulated failures and cancellation.

Scripts are driven the way the runtime drives a model: stream a turn, append the assistant
message, run its tool calls through the demo tool registry, append the results, repeat.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field

import pytest

from outlive._ticks import ticker
from outlive.providers import (
    DemoProvider,
    Finish,
    Message,
    ModelSettings,
    PermanentProviderError,
    ProviderEvent,
    TextDelta,
    ThinkingDelta,
    ToolCall,
    ToolCallEvent,
    ToolSpec,
    TransientProviderError,
    collect,
)
from outlive.providers.demo import CHARS_PER_SECOND, TICK_SECONDS, pieces, plan_turn
from outlive.tools import ToolContext, ToolRegistry, demo_tools

SETTINGS = ModelSettings("scripted")


@dataclass
class Run:
    turns: list[list[ProviderEvent]] = field(default_factory=list)
    messages: list[Message] = field(default_factory=list)

    def shapes(self) -> list[list[str]]:
        return [shape(t) for t in self.turns]

    @property
    def final_text(self) -> str:
        return text_of(self.turns[-1])

    def calls(self) -> list[ToolCall]:
        return [e.call for t in self.turns for e in t if isinstance(e, ToolCallEvent)]


def shape(events: list[ProviderEvent]) -> list[str]:
    """Consecutive deltas of one kind collapse to one word: easy to compare whole scripts."""
    out: list[str] = []
    for e in events:
        if isinstance(e, TextDelta):
            word = "text"
        elif isinstance(e, ThinkingDelta):
            word = "thinking"
        elif isinstance(e, ToolCallEvent):
            word = f"call:{e.call.name}"
        else:
            word = f"finish:{e.stop_reason}"
        if not out or out[-1] != word or word.startswith(("call", "finish")):
            out.append(word)
    return out


def text_of(events: list[ProviderEvent]) -> str:
    return "".join(e.text for e in events if isinstance(e, TextDelta))


async def drive(
    prompt: str,
    *,
    provider: DemoProvider | None = None,
    registry: ToolRegistry | None = None,
    history: list[Message] | None = None,
    session_id: str = "ses_1",
) -> Run:
    provider = provider or DemoProvider(speed=0)
    registry = registry if registry is not None else demo_tools(speed=0)
    run = Run(messages=[*(history or []), Message.user(prompt)])
    for _ in range(8):
        events = [e async for e in provider.stream(run.messages, registry.specs(), SETTINGS)]
        run.turns.append(events)
        finish = events[-1]
        assert isinstance(finish, Finish)
        assert sum(isinstance(e, Finish) for e in events) == 1
        calls = [e.call for e in events if isinstance(e, ToolCallEvent)]
        assert (finish.stop_reason == "tool_calls") == bool(calls)
        run.messages.append(Message.assistant(text_of(events), calls))
        if finish.stop_reason != "tool_calls":
            return run
        for call in calls:
            result = await registry.run(call, ToolContext(session_id, call.call_id))
            run.messages.append(
                Message.tool_result(call.call_id, result.model_text(), is_error=not result.ok)
            )
    raise AssertionError("the script did not stop within 8 turns")


async def test_plain_prompt_uses_one_lookup_then_answers() -> None:
    run = await drive("What is a durable session?")
    assert run.shapes() == [
        ["text", "call:lookup", "finish:tool_calls"],
        ["text", "finish:stop"],
    ]
    (call,) = run.calls()
    assert call.arguments == {"query": "What is a durable session"}
    assert "matches" in run.final_text and "demo index" in run.final_text
    assert 2 <= run.final_text.count(". ") + 1 <= 4


async def test_run_long_streams_many_paragraphs_around_two_slow_tasks() -> None:
    run = await drive("Please RUN LONG today")
    assert run.shapes() == [
        ["text", "call:slow_task", "finish:tool_calls"],
        ["text", "call:slow_task", "finish:tool_calls"],
        ["text", "finish:stop"],
    ]
    assert all(c.name == "slow_task" and c.arguments["seconds"] > 0 for c in run.calls())
    full = "".join(text_of(t) for t in run.turns)
    assert full.count("\n\n") >= 12
    assert "finished after" in text_of(run.turns[1])  # it read the first slow task's result
    assert "The second slow task is done" in run.final_text


async def test_run_long_admits_an_interrupted_slow_task() -> None:
    messages = [Message.user("run long")]
    first = plan_turn(messages, demo_tools(speed=0).specs())
    (call,) = first.tool_calls
    messages += [
        Message.assistant(first.text, [call]),
        Message.tool_result(call.call_id, '{"error": "interrupted"}', is_error=True),
    ]
    second = plan_turn(messages, demo_tools(speed=0).specs())
    assert second.text.startswith("The first slow task did not finish (interrupted)")
    assert [c.name for c in second.tool_calls] == ["slow_task"]


async def test_ask_me_asks_a_question_then_takes_the_reply() -> None:
    run = await drive("ask me something")
    assert run.shapes() == [
        ["text", "call:ask_user", "finish:tool_calls"],
        ["text", "finish:stop"],
    ]
    (call,) = run.calls()
    assert call.arguments["question"].endswith("?")
    assert len(call.arguments["options"]) >= 2
    reply = await drive(call.arguments["options"][1], history=run.messages)
    assert reply.shapes() == [["text", "finish:stop"]]
    assert f"you chose “{call.arguments['options'][1]}”" in reply.final_text


async def test_ask_me_uses_an_answer_the_runtime_puts_in_the_tool_result() -> None:
    messages = [Message.user("ask me")]
    first = plan_turn(messages, demo_tools(speed=0).specs())
    (call,) = first.tool_calls
    messages += [
        Message.assistant(first.text, [call]),
        Message.tool_result(call.call_id, json.dumps({"answer": "Just the numbers"})),
    ]
    second = plan_turn(messages, demo_tools(speed=0).specs())
    assert second.stop_reason == "stop"
    assert "you chose “Just the numbers”" in second.text


async def test_fail_a_tool_reports_the_failure() -> None:
    run = await drive("please fail a tool")
    assert run.shapes() == [
        ["text", "call:flaky", "finish:tool_calls"],
        ["text", "finish:stop"],
    ]
    tool_message = run.messages[2]
    assert tool_message.role == "tool" and tool_message.is_error
    assert "failed on purpose" in run.final_text
    assert "never as a success" in run.final_text


@pytest.mark.parametrize("prompt", ["count", "Idempotent please", "bump the counter"])
async def test_counter_prompts_call_the_idempotent_tool(prompt: str) -> None:
    registry = demo_tools(speed=0)
    run = await drive(prompt, registry=registry)
    assert run.shapes() == [
        ["text", "call:counter", "finish:tool_calls"],
        ["text", "finish:stop"],
    ]
    assert "The counter now reads 1." in run.final_text
    again = await drive("count again", registry=registry, history=run.messages)
    assert "The counter now reads 2." in again.final_text


async def test_account_is_not_a_counter_prompt() -> None:
    run = await drive("my account")
    assert run.calls()[0].name == "lookup"


async def test_think_adds_thinking_before_each_turns_text() -> None:
    run = await drive("think about queues")
    assert run.shapes() == [
        ["thinking", "text", "call:lookup", "finish:tool_calls"],
        ["thinking", "text", "finish:stop"],
    ]
    long = await drive("think, then run long")
    assert all(s[:2] == ["thinking", "text"] for s in long.shapes())


async def test_length_stops_with_length() -> None:
    run = await drive("what is the length of a lease?")
    assert run.shapes() == [["text", "finish:length"]]
    assert len(run.final_text) > 200


async def test_markdown_answers_in_markdown() -> None:
    run = await drive("show me some markdown")
    assert run.shapes() == [["text", "finish:stop"]]
    for part in ("## ", "| part |", "```python", "> A cancel", "- [x]", "](https://"):
        assert part in run.final_text


async def test_provider_error_n_fails_the_first_n_calls() -> None:
    provider = DemoProvider(speed=0)
    messages = [Message.user("hello with provider error 3")]
    for attempt in (1, 2, 3):
        with pytest.raises(TransientProviderError) as info:
            await collect(provider.stream(messages, [], SETTINGS))
        assert info.value.transient and info.value.status == 503
        assert f"{attempt} of 3" in str(info.value)
    done = await collect(provider.stream(messages, [], SETTINGS))
    assert done.stop_reason == "stop"
    # Later turns of the same message do not fail again.
    run = await drive("hello with provider error 3", provider=provider)
    assert run.shapes()[-1] == ["text", "finish:stop"]


async def test_provider_error_defaults_to_two_and_is_per_session() -> None:
    provider = DemoProvider(speed=0)
    messages = [Message.user("provider error")]
    for session in ("a", "b"):
        settings = ModelSettings("scripted", extra={"session_id": session})
        for _ in range(2):
            with pytest.raises(TransientProviderError):
                await collect(provider.stream(messages, [], settings))
        assert (await collect(provider.stream(messages, [], settings))).stop_reason == "stop"


async def test_permanent_provider_error_always_fails() -> None:
    provider = DemoProvider(speed=0)
    for _ in range(3):
        with pytest.raises(PermanentProviderError) as info:
            await collect(provider.stream([Message.user("permanent provider error")], [], SETTINGS))
        assert not info.value.transient and info.value.status == 400


async def test_missing_tool_is_explained_in_text() -> None:
    run = await drive("hello", registry=ToolRegistry())
    assert run.shapes() == [["text", "finish:stop"]]
    assert "`lookup`" in run.final_text


async def test_no_user_message_gets_a_greeting() -> None:
    done = await collect(DemoProvider(speed=0).stream([Message.system("be nice")], [], SETTINGS))
    assert done.stop_reason == "stop" and done.text.startswith("Hello!")


async def test_a_finished_script_does_not_restart() -> None:
    run = await drive("hello")
    extra = plan_turn(run.messages, demo_tools(speed=0).specs())
    assert extra.stop_reason == "stop" and not extra.tool_calls


async def test_script_is_deterministic_and_call_ids_are_unique() -> None:
    first = await drive("hello there")
    second = await drive("hello there")
    assert first.turns == second.turns
    more = await drive("hello there", history=first.messages)
    ids = [c.call_id for c in first.calls() + more.calls()]
    assert len(ids) == len(set(ids)) == 2


async def test_usage_counts_words() -> None:
    provider = DemoProvider(speed=0)
    messages = [Message.user("one two three length")]
    events = [e async for e in provider.stream(messages, [], SETTINGS)]
    finish = events[-1]
    assert isinstance(finish, Finish) and finish.usage is not None
    assert finish.usage.input_tokens == 4
    assert finish.usage.output_tokens == len(text_of(events).split())


def test_pieces_are_small_and_join_back() -> None:
    text = "Hello,  world!\n\nA supercalifragilistic word and “quotes”. "
    parts = list(pieces(text))
    assert "".join(parts) == text
    assert len(parts) > 8
    assert all(0 < len(p) <= 10 for p in parts)


class Recording(DemoProvider):
    """Adds up the pacing instead of sleeping, on a clock of its own; `lag` is how late the
    reader's loop wakes from each wait."""

    def __init__(self, speed: float, lag: float = 0.0) -> None:
        super().__init__(speed)
        self.slept: list[float] = []
        self.clock = 0.0
        self.lag = lag

    async def _sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.clock += seconds + self.lag

    def _now(self) -> float:
        return self.clock


@pytest.mark.parametrize(("speed", "low", "high"), [(1.0, 25, 35), (2.0, 12.5, 17.5)])
async def test_run_long_takes_about_thirty_seconds_at_speed_one(
    speed: float, low: float, high: float
) -> None:
    provider = Recording(speed)
    run = await drive("run long", provider=provider)
    assert low <= sum(provider.slept) <= high
    assert len(provider.slept) > 500  # many small pieces, not a few big ones
    chars = sum(len(text_of(t)) for t in run.turns)
    assert chars / CHARS_PER_SECOND / speed <= sum(provider.slept)


async def test_a_reader_that_wakes_late_does_not_stretch_the_answer() -> None:
    """Like a real server's stream, the answer keeps its schedule: a loop 50 ms late at every
    wake-up (a busy worker) ends each of the session's three answers at most 50 ms late, not
    50 ms late per piece (hundreds of pieces: it would be tens of seconds)."""
    on_time, late = Recording(1.0), Recording(1.0, lag=0.05)
    await drive("run long", provider=on_time)
    await drive("run long", provider=late)
    assert len(on_time.slept) > 500
    assert late.clock - on_time.clock <= 3 * 0.05 + 1e-6
    assert len(late.slept) < len(on_time.slept)  # it read what piled up without waiting


async def test_speed_zero_never_sleeps() -> None:
    provider = Recording(0)
    await drive("run long", provider=provider)
    assert provider.slept == []


def test_speed_must_be_non_negative() -> None:
    with pytest.raises(ValueError, match="demo speed"):
        DemoProvider(speed=-1)


async def test_settings_can_override_speed() -> None:
    provider = Recording(1.0)
    settings = ModelSettings("scripted", extra={"demo_speed": 0})
    await collect(provider.stream([Message.user("run long")], [], settings))
    assert provider.slept == []


async def consume_until_first_text(
    provider: DemoProvider, prompt: str
) -> tuple[asyncio.Task[None], list[ProviderEvent]]:
    seen: list[ProviderEvent] = []
    first = asyncio.Event()
    specs: list[ToolSpec] = demo_tools(speed=0).specs()

    async def consume() -> None:
        async for event in provider.stream([Message.user(prompt)], specs, SETTINGS):
            seen.append(event)
            first.set()

    task = asyncio.create_task(consume())
    await asyncio.wait_for(first.wait(), 5)
    return task, seen


async def cancels_at_once(task: asyncio.Task[None]) -> None:
    """Cancel `task` and check it stopped within a few turns of the loop, that is without
    waiting for any timer (the next piece's is one word away at speed 1). Counting turns, not
    milliseconds, keeps a loaded machine from failing it."""
    task.cancel()
    for _ in range(10):
        if task.done():
            break
        await asyncio.sleep(0)
    assert task.done(), "the cancel waited for a timer"
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_cancel_at_speed_one_stops_at_once() -> None:
    task, seen = await consume_until_first_text(DemoProvider(speed=1.0), "run long")
    await cancels_at_once(task)
    count = len(seen)
    await asyncio.sleep(0.1)
    assert len(seen) == count and not any(isinstance(e, Finish) for e in seen)


async def test_cancel_before_the_first_token() -> None:
    async def consume() -> None:
        # Speed 0.01: the first token is 30 s away, so the cancel comes before it.
        async for _ in DemoProvider(speed=0.01).stream([Message.user("hi")], [], SETTINGS):
            raise AssertionError("no event expected")

    task = asyncio.create_task(consume())
    await asyncio.sleep(0.01)
    await cancels_at_once(task)


async def test_speed_zero_still_yields_control() -> None:
    seen: list[ProviderEvent] = []

    async def consume() -> None:
        async for event in DemoProvider(speed=0).stream([Message.user("run long")], [], SETTINGS):
            seen.append(event)

    task = asyncio.create_task(consume())
    for _ in range(3):
        await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert 0 < len(seen) < 100


async def test_concurrent_streams_keep_pace_and_order_on_one_shared_clock() -> None:
    """A hundred streams at once wait on one ticker (a timer per 20 ms slot, not one per
    piece): each still streams its pieces in order, never ahead of its schedule. (That a late
    loop does not stretch an answer is shown on a clock of the test's own, above: on this
    machine's clock how late a hundred streams end depends on its load.)"""
    speed = 10.0
    provider = DemoProvider(speed=speed)
    specs = demo_tools(speed=0).specs()
    messages = [Message.user("run long")]
    turn = plan_turn(messages, specs)
    planned = provider.planned_seconds(turn)
    clock = ticker(TICK_SECONDS)
    fired = clock.fired

    async def one() -> tuple[float, list[ProviderEvent]]:
        started = time.monotonic()
        events = [e async for e in provider.stream(messages, specs, SETTINGS)]
        return time.monotonic() - started, events

    runs = await asyncio.gather(*(one() for _ in range(100)))
    for elapsed, events in runs:
        assert [e.text for e in events if isinstance(e, TextDelta)] == list(pieces(turn.text))
        assert planned - 1e-3 <= elapsed
    ticks = clock.fired - fired
    assert ticks <= max(e for e, _ in runs) / TICK_SECONDS + 5
    assert ticks * 20 < sum(len(ev) for _, ev in runs)  # far fewer timers than pieces


async def test_call_by_name_runs_the_demo_agents_own_tools_and_others_only_with_demo_calls():
    """`call <tool>` runs a tool by name for every API key holder: without `--demo-calls`
    (`DemoProvider(calls=True)`) only the built-in demo agent's own tools, for it alone."""
    from outlive.providers import DEMO_CALLS_EXTRA
    from outlive.runtime import demo_agent

    specs = [*demo_tools(speed=0).specs(), ToolSpec("fs__read", "Read.", {"type": "object"})]
    builtin = ModelSettings("scripted", extra=demo_agent(0).extra)
    assert builtin.extra == {DEMO_CALLS_EXTRA: True}

    async def called(provider: DemoProvider, prompt: str, settings: ModelSettings) -> list[str]:
        events = [e async for e in provider.stream([Message.user(prompt)], specs, settings)]
        return [e.call.name for e in events if isinstance(e, ToolCallEvent)]

    off, on = DemoProvider(speed=0), DemoProvider(speed=0, calls=True)
    assert await called(off, 'call lookup {"query": "x"}', builtin) == ["lookup"]
    assert await called(off, 'call fs__read {"path": "a"}', builtin) == []
    assert await called(off, 'call lookup {"query": "x"}', SETTINGS) == []
    assert await called(on, 'call fs__read {"path": "a"}', SETTINGS) == ["fs__read"]


def test_the_plain_answers_hint_names_every_demo_word():
    from outlive.providers import DEMO_WORDS

    text = plan_turn([], demo_tools(speed=0).specs()).text  # the greeting ends with the hint
    assert len(DEMO_WORDS) == 13
    assert all(f"“{word}”" in text for word in DEMO_WORDS), text


async def test_usage_counts_the_tool_schemas_too() -> None:
    """The input count is all the model is sent, as a real provider's is: a window set on
    the demo route (in its words) is then measured honestly."""
    provider = DemoProvider(speed=0)
    tools = demo_tools(0).specs()
    messages = [Message.user("one two three length")]
    plain = [e async for e in provider.stream(messages, [], SETTINGS)][-1]
    with_tools = [e async for e in provider.stream(messages, tools, SETTINGS)][-1]
    assert isinstance(plain, Finish) and isinstance(with_tools, Finish)
    assert plain.usage is not None and with_tools.usage is not None
    schema_words = sum(len(f"{t.name} {t.description} {json.dumps(t.parameters)}".split())
                       for t in tools)
    assert with_tools.usage.input_tokens == plain.usage.input_tokens + schema_words


SUMMARIZE = ModelSettings("scripted", max_tokens=60, extra={"purpose": "summary"})


def summarizer_request(transcript: str, prior: str | None = None) -> list[Message]:
    """What `runtime.context.Compactor` sends a summarizer."""
    from outlive.runtime.context import SUMMARIZER_PROMPT

    head = f"The summary so far:\n{prior}\n\n" if prior else ""
    return [Message.system(SUMMARIZER_PROMPT),
            Message.user(f"{head}The conversation to add to it:\n{transcript}")]


async def test_a_summarizer_request_gets_a_summary_of_what_the_user_asked() -> None:
    provider = DemoProvider(speed=0)
    transcript = "\n".join([
        "User: please run long and tell me everything about leases, fences, gates and the"
        " write budget of a worker",
        "Assistant: Let me look up “please run long” first.",
        'Assistant called lookup({"query": "please run long"})',
        'Tool lookup returned: {"summary": "found"}',
        "Assistant: Here is what I found.",
        "User: provider error 2, ask me, send it",
    ])
    events = [e async for e in provider.stream(summarizer_request(transcript),
                                               demo_tools(0).specs(), SUMMARIZE)]
    # streamed like an answer, no tool calls, none of the scripts its words would pick
    assert [type(e) for e in events[:-1]] == [TextDelta] * (len(events) - 1)
    assert len(events) > 5
    finish = events[-1]
    assert isinstance(finish, Finish) and finish.stop_reason == "stop"
    assert text_of(events) == (
        "What the user asked so far, oldest first:\n"
        "- please run long and tell me everything about leases, fences, gates and …"
        " (tools: lookup)\n"
        "- provider error 2, ask me, send it")
    assert finish.usage is not None
    assert finish.usage.output_tokens == len(text_of(events).split())


async def test_summaries_build_on_each_other_within_their_budget() -> None:
    provider = DemoProvider(speed=0)
    summary: str | None = None
    for n in range(0, 40, 4):
        transcript = "\n".join(f"User: question {i} about the topic of part {i}"
                               for i in range(n, n + 4))
        done = await collect(provider.stream(summarizer_request(transcript, summary), [],
                                             SUMMARIZE))
        summary = done.text
        assert len(summary.split()) <= 60
    assert summary is not None
    lines = summary.splitlines()
    assert lines[-1] == "- question 39 about the topic of part 39"
    kept = len(lines) - 1
    assert kept >= 5
    assert lines[0] == (
        f"What the user asked so far, oldest first ({40 - kept} earlier ones left out):")
    # the same request, the same summary: a resumed session gets the same one
    again = await collect(provider.stream(summarizer_request("User: x", summary), [], SUMMARIZE))
    assert again.text == (await collect(provider.stream(
        summarizer_request("User: x", summary), [], SUMMARIZE))).text


async def test_a_summary_streams_at_the_demo_speed() -> None:
    provider = DemoProvider(speed=50)
    transcript = "\n".join(f"User: question {i} about leases" for i in range(8))
    t0 = time.monotonic()
    done = await collect(provider.stream(summarizer_request(transcript), [], SUMMARIZE))
    took = time.monotonic() - t0
    planned = (0.3 + len(done.text) / CHARS_PER_SECOND) / 50
    assert planned * 0.9 <= took <= planned + 0.5
