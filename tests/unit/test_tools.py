"""Typed tools, the registry's failure capture, and the demo tools."""

from __future__ import annotations

import asyncio
import json
import math
import time
from typing import Any

import pytest
from pydantic import BaseModel, Field

from outlive.providers import ToolCall, ToolSpec
from outlive.tools import (
    CancelEvent,
    Tool,
    ToolContext,
    ToolFailure,
    ToolRegistry,
    ToolResult,
    demo_tools,
    tool,
)
from outlive.tools.demo import SendMessageArgs


class EchoArgs(BaseModel):
    text: str = Field(description="What to echo.")
    times: int = Field(default=1, ge=1, le=5)


class Reply(BaseModel):
    text: str


class Amount(BaseModel):
    cents: int


class NoArgs(BaseModel):
    pass


@tool(name="echo", description="Echo the text.", timeout=1.0)
async def echo(args: EchoArgs, ctx: ToolContext) -> dict[str, Any]:
    return {"echo": args.text * args.times, "key": ctx.idempotency_key}


@tool()
async def reply(args: EchoArgs, ctx: ToolContext) -> Reply:
    """Answer with a pydantic model.

    More details that are not part of the description.
    """
    return Reply(text=args.text)


@tool(name="boom")
async def boom(args: NoArgs, ctx: ToolContext) -> None:
    raise ValueError("it broke")


def ctx(call_id: str = "call_1", **kwargs: Any) -> ToolContext:
    return ToolContext("ses_1", call_id, **kwargs)


def value(result: ToolResult) -> Any:
    assert result.ok, result.error
    return result.result


def call(name: str, call_id: str = "call_1", **arguments: Any) -> ToolCall:
    return ToolCall(call_id, name, arguments)


# --- definitions --------------------------------------------------------------------------


def test_spec_is_the_pydantic_json_schema() -> None:
    spec = echo.spec()
    assert isinstance(spec, ToolSpec)
    assert (spec.name, spec.description) == ("echo", "Echo the text.")
    assert spec.parameters == EchoArgs.model_json_schema()
    assert spec.parameters["type"] == "object"
    assert spec.parameters["required"] == ["text"]
    assert spec.parameters["properties"]["times"]["maximum"] == 5


def test_name_and_description_default_to_the_function() -> None:
    assert (reply.name, reply.description) == ("reply", "Answer with a pydantic model.")
    assert reply.args_model is EchoArgs
    assert (reply.timeout, reply.idempotent) == (30.0, False)


def test_decorator_refuses_bad_definitions() -> None:
    def not_async(args: NoArgs, ctx: ToolContext) -> None:
        return None

    async def untyped(args: dict[str, Any], ctx: ToolContext) -> None:
        return None

    async def one_arg(args: NoArgs) -> None:
        return None

    with pytest.raises(TypeError, match="async"):
        tool()(not_async)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="BaseModel"):
        tool()(untyped)  # type: ignore[type-var]
    with pytest.raises(TypeError, match=r"\(args, ctx\)"):
        tool()(one_arg)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="must match"):
        tool(name="has space")(echo.fn)
    with pytest.raises(ValueError, match="positive timeout"):
        tool(name="t", timeout=0)(echo.fn)


def test_registry_lookups() -> None:
    registry = ToolRegistry([echo, reply])
    assert registry.get("echo") is echo and registry.get("nope") is None
    assert registry.names() == ["echo", "reply"] and len(registry) == 2
    assert "echo" in registry and list(registry) == [echo, reply]
    assert [s.name for s in registry.specs()] == ["echo", "reply"]
    with pytest.raises(ValueError, match="already registered"):
        registry.add(echo)


def test_idempotency_key_format() -> None:
    assert ToolContext("ses_ABC", "call_7").idempotency_key == "ses_ABC:call_7"


# --- running ------------------------------------------------------------------------------


async def test_run_success() -> None:
    result = await ToolRegistry([echo]).run(call("echo", text="ab", times=2), ctx())
    assert result.ok and result.error is None
    assert result.result == {"echo": "abab", "key": "ses_1:call_1"}
    assert isinstance(result.duration_ms, int) and result.duration_ms >= 0
    assert result.to_dict() == {
        "ok": True,
        "result": result.result,
        "duration_ms": result.duration_ms,
    }
    assert result.model_text() == '{"echo": "abab", "key": "ses_1:call_1"}'


async def test_pydantic_results_become_plain_json() -> None:
    result = await ToolRegistry([reply]).run(call("reply", text="hi"), ctx())
    assert result.ok and result.result == {"text": "hi"}


async def test_invalid_arguments_are_a_failed_result() -> None:
    registry = ToolRegistry([echo])
    result = await registry.run(call("echo", times="many"), ctx())
    assert not result.ok and result.result is None
    assert result.error is not None
    assert result.error.startswith("invalid arguments for tool 'echo': ")
    assert "text: Field required" in result.error
    assert "times: Input should be a valid integer" in result.error and "'many'" in result.error
    too_big = await registry.run(call("echo", text="x", times=9), ctx())
    assert too_big.error is not None and "times: Input should be less than or equal to 5" in (
        too_big.error
    )


async def test_unknown_tool_is_a_failed_result() -> None:
    result = await ToolRegistry([echo]).run(call("nope"), ctx())
    assert result == ToolResult(False, None, "unknown tool 'nope'; available: echo", 0)


async def test_exception_becomes_a_failed_result() -> None:
    result = await ToolRegistry([boom]).run(call("boom"), ctx())
    assert not result.ok
    assert result.error == "ValueError: it broke"
    assert result.to_dict() == {
        "ok": False,
        "error": "ValueError: it broke",
        "duration_ms": result.duration_ms,
    }
    assert result.model_text() == '{"error": "ValueError: it broke"}'


@pytest.mark.parametrize("event", [CancelEvent, asyncio.Event])  # the watched and the plain signal
async def test_timeout_cancels_the_tool_and_fails(event: type[asyncio.Event]) -> None:
    cleaned = asyncio.Event()

    @tool(name="sleepy", timeout=0.05)
    async def sleepy(args: NoArgs, ctx: ToolContext) -> None:
        try:
            await asyncio.sleep(10)
        finally:
            cleaned.set()

    started = time.monotonic()
    result = await ToolRegistry([sleepy]).run(call("sleepy"), ctx(cancel=event()))
    assert time.monotonic() - started < 1
    assert not result.ok and result.error == "timed out after 0.05s"
    assert cleaned.is_set()
    assert result.duration_ms >= 50


@pytest.mark.parametrize("event", [CancelEvent, asyncio.Event])  # the watched and the plain signal
async def test_cancelling_the_caller_propagates_and_cancels_the_tool(
    event: type[asyncio.Event],
) -> None:
    started = asyncio.Event()
    seen: list[str] = []

    @tool(name="hang")
    async def hang(args: NoArgs, ctx: ToolContext) -> None:
        started.set()
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            seen.append("cancelled")
            raise

    task = asyncio.create_task(ToolRegistry([hang]).run(call("hang"), ctx(cancel=event())))
    await started.wait()
    t0 = time.monotonic()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert time.monotonic() - t0 < 0.05
    assert seen == ["cancelled"]


@pytest.mark.parametrize("event", [CancelEvent, asyncio.Event])  # the watched and the plain signal
async def test_cancel_signal_interrupts_the_tool(event: type[asyncio.Event]) -> None:
    started = asyncio.Event()

    @tool(name="hang")
    async def hang(args: NoArgs, ctx: ToolContext) -> None:
        started.set()
        await asyncio.sleep(10)

    context = ctx(cancel=event())
    task = asyncio.create_task(ToolRegistry([hang]).run(call("hang"), context))
    await started.wait()
    t0 = time.monotonic()
    context.cancel.set()
    result = await task
    assert time.monotonic() - t0 < 0.05
    assert not result.ok and result.interrupted and result.error == "interrupted"
    assert result.to_dict()["interrupted"] is True


@pytest.mark.parametrize("event", [CancelEvent, asyncio.Event])  # the watched and the plain signal
async def test_cancel_signal_set_before_the_call_skips_the_tool(event: type[asyncio.Event]) -> None:
    ran: list[bool] = []

    @tool(name="never")
    async def never(args: NoArgs, ctx: ToolContext) -> None:
        ran.append(True)

    context = ctx(cancel=event())
    context.cancel.set()
    result = await ToolRegistry([never]).run(call("never"), context)
    assert result.interrupted and not ran


@pytest.mark.parametrize("value", [object(), math.nan, {"nested": [object()]}])
async def test_non_json_results_fail(value: Any) -> None:
    @tool(name="odd")
    async def odd(args: NoArgs, ctx: ToolContext) -> Any:
        return value

    result = await ToolRegistry([odd]).run(call("odd"), ctx())
    assert not result.ok and result.error is not None
    assert "not JSON-serialisable" in result.error


async def test_callbacks_reach_the_tool() -> None:
    progress: list[str] = []
    stages: list[str] = []
    titles: list[str] = []

    async def on_progress(message: str) -> None:
        progress.append(message)

    async def on_stage(stage: str) -> None:
        stages.append(stage)

    async def on_title(title: str) -> None:
        titles.append(title)

    @tool(name="chatty")
    async def chatty(args: NoArgs, ctx: ToolContext) -> str:
        await ctx.progress("half way")
        await ctx.set_stage("working")
        await ctx.set_title("A title")
        return "done"

    context = ctx(progress=on_progress, set_stage=on_stage, set_title=on_title)
    result = await ToolRegistry([chatty]).run(call("chatty"), context)
    assert result.ok and result.result == "done"
    assert (progress, stages, titles) == (["half way"], ["working"], ["A title"])


async def test_default_callbacks_do_nothing() -> None:
    """A tool that reports progress, a stage and a title runs on a bare context (as when it is
    called directly): the default callbacks accept the reports and return nothing; they do
    not signal a cancel."""
    context = ctx()
    assert await context.progress("x") is None
    assert await context.set_stage("x") is None
    assert await context.set_title("x") is None

    @tool(name="chatty")
    async def chatty(args: NoArgs, ctx: ToolContext) -> str:
        await ctx.progress("half way")
        await ctx.set_stage("working")
        await ctx.set_title("A title")
        return "done"

    assert await chatty(NoArgs(), context) == "done"
    result = await ToolRegistry([chatty]).run(call("chatty"), context)
    assert result.ok and result.result == "done"
    assert not context.cancel.is_set()


async def test_tool_can_be_called_directly() -> None:
    assert await echo(EchoArgs(text="a"), ctx()) == {"echo": "a", "key": "ses_1:call_1"}


# --- demo tools ---------------------------------------------------------------------------


def test_demo_tools_specs() -> None:
    registry = demo_tools(speed=0)
    assert registry.names() == ["lookup", "slow_task", "flaky", "counter", "send_message",
                                "ask_user"]
    assert registry.is_idempotent("counter")
    assert not registry.is_idempotent("lookup") and not registry.is_idempotent("missing")
    for spec in registry.specs():
        assert spec.description and spec.parameters["type"] == "object"


async def test_lookup_is_deterministic() -> None:
    registry = demo_tools(speed=0)
    a = await registry.run(call("lookup", query="durable  sessions"), ctx())
    b = await registry.run(call("lookup", query="durable sessions"), ctx("call_2"))
    assert a.ok and a.result == b.result
    assert value(a)["query"] == "durable sessions" and value(a)["summary"]


async def test_slow_task_reports_progress_even_at_speed_zero() -> None:
    progress: list[str] = []
    stages: list[str] = []

    async def on_progress(message: str) -> None:
        progress.append(message)

    async def on_stage(stage: str) -> None:
        stages.append(stage)

    started = time.monotonic()
    result = await demo_tools(speed=0).run(
        call("slow_task", seconds=8, label="crunching"),
        ctx(progress=on_progress, set_stage=on_stage),
    )
    assert time.monotonic() - started < 0.5
    assert result.ok and value(result)["steps"] == 8
    assert progress[0] == "crunching: step 1 of 8" and len(progress) == 8
    assert stages == ["crunching"]
    short = await demo_tools(speed=0).run(call("slow_task", seconds=0), ctx())
    assert short.ok and value(short)["steps"] == 3


async def test_slow_task_is_cancelled_promptly() -> None:
    task = asyncio.create_task(demo_tools(speed=1).run(call("slow_task", seconds=8), ctx()))
    await asyncio.sleep(0.05)
    t0 = time.monotonic()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert time.monotonic() - t0 < 0.05


async def test_slow_task_progress_is_paced_at_speed() -> None:
    times: list[float] = []

    async def on_progress(message: str) -> None:
        times.append(time.monotonic())

    started = time.monotonic()
    result = await demo_tools(speed=20).run(call("slow_task", seconds=3), ctx(progress=on_progress))
    assert result.ok and len(times) == 3
    assert 0.1 <= times[-1] - started < 1.0  # 3 s of work at speed 20 is 0.15 s


async def test_flaky_fails_clearly_when_told() -> None:
    registry = demo_tools(speed=0)
    failed = await registry.run(call("flaky", fail=True, reason="testing"), ctx())
    assert not failed.ok
    assert failed.error == {"message": "the flaky tool failed on purpose: testing",
                            "retryable": False, "value": {"reason": "testing"}}
    fine = await registry.run(call("flaky"), ctx())
    assert fine.ok


async def test_a_returned_tool_failure_is_a_failure_with_its_details() -> None:
    @tool(name="charge")
    async def charge(args: Amount, ctx: ToolContext) -> ToolFailure:
        return ToolFailure("card declined", value={"status": 402, "amount": args.cents},
                           retryable=True)

    out = await ToolRegistry([charge]).run(call("charge", cents=5), ctx())
    assert (out.ok, out.result) == (False, None)
    assert out.error == {"message": "card declined", "retryable": True,
                         "value": {"status": 402, "amount": 5}}
    assert out.to_dict()["error"] == out.error and out.to_dict()["ok"] is False
    assert json.loads(out.model_text()) == {"error": out.error}
    bare = ToolFailure("no such record")
    assert bare.to_error() == {"message": "no such record", "retryable": False}


async def test_counter_dedups_by_idempotency_key() -> None:
    registry = demo_tools(speed=0)
    first = await registry.run(call("counter", "call_1"), ctx("call_1"))
    repeat = await registry.run(call("counter", "call_1"), ctx("call_1"))
    other = await registry.run(call("counter", "call_2", step=5), ctx("call_2"))
    assert first.result == {
        "name": "demo",
        "value": 1,
        "idempotency_key": "ses_1:call_1",
        "deduplicated": False,
    }
    assert value(repeat)["value"] == 1 and value(repeat)["deduplicated"] is True
    assert value(other)["value"] == 6
    other_session = await registry.run(call("counter"), ToolContext("ses_2", "call_1"))
    assert value(other_session)["value"] == 7
    assert value(await demo_tools(speed=0).run(call("counter"), ctx()))["value"] == 1


async def test_counter_dedups_concurrent_repeats() -> None:
    registry = demo_tools(speed=0)
    results = await asyncio.gather(
        registry.run(call("counter"), ctx()), registry.run(call("counter"), ctx())
    )
    assert [value(r)["value"] for r in results] == [1, 1]
    assert sorted(value(r)["deduplicated"] for r in results) == [False, True]


async def test_ask_user_is_a_no_op() -> None:
    result = await demo_tools(speed=0).run(
        call("ask_user", question="Which?", options=["a", "b"]), ctx()
    )
    assert result.ok and result.result == {"asked": True}
    bad = await demo_tools(speed=0).run(call("ask_user"), ctx())
    assert not bad.ok and "question: Field required" in (bad.error or "")


def test_demo_tools_refuse_negative_speed() -> None:
    with pytest.raises(ValueError, match="demo speed"):
        demo_tools(speed=-0.5)


def test_tool_type_is_generic() -> None:
    typed: Tool[EchoArgs] = echo
    assert typed.args_model is EchoArgs


def test_needs_approval_is_a_flag_or_a_check_on_the_validated_arguments() -> None:
    def outside(args: SendMessageArgs, ctx: ToolContext) -> bool:
        return args.to != "team"

    def broken(args: SendMessageArgs, ctx: ToolContext) -> bool:
        raise RuntimeError("bug")

    async def send(args: SendMessageArgs, ctx: ToolContext) -> dict[str, bool]:
        return {"sent": True}

    ctx = ToolContext("ses_1", "call_1")
    checked = tool(name="send", needs_approval=outside)(send)
    assert not checked.needs_approval({"to": "team", "text": "hi"}, ctx)
    assert checked.needs_approval({"to": "bob", "text": "hi"}, ctx)
    assert not checked.needs_approval({"to": "bob"}, ctx)  # invalid: it fails without running
    assert tool(name="send", needs_approval=broken)(send).needs_approval(
        {"to": "team", "text": "hi"}, ctx)  # a failing check asks
    assert tool(name="send", needs_approval=True)(send).needs_approval({}, ctx)
    assert not tool(name="send")(send).needs_approval({"to": "bob", "text": "x"}, ctx)
    registry = demo_tools(speed=0)
    assert registry.needs_approval(ToolCall("c", "send_message", {"text": "x"}), ctx)
    assert not registry.needs_approval(ToolCall("c", "lookup", {"query": "x"}), ctx)
    assert not registry.needs_approval(ToolCall("c", "missing", {}), ctx)


async def test_a_cancel_event_calls_back_once_and_forgets_on_request() -> None:
    event = CancelEvent()
    seen: list[str] = []
    forget = event.on_set(lambda: seen.append("a"))
    event.on_set(lambda: seen.append("b"))
    forget()
    event.set()
    event.set()
    assert seen == ["b"] and event.is_set()
    event.on_set(lambda: seen.append("late"))  # set already: called at once
    assert seen == ["b", "late"]
    await asyncio.wait_for(event.wait(), 1)  # still an asyncio.Event to the tools
