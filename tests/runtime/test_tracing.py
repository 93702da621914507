"""Traces from an in-process worker on both databases (docs/tracing.md), exported by the
SDK's real OTLP/HTTP exporter to a receiver the test runs: a session created with a caller's
`traceparent` whose run waits for an approval is one trace under the caller's span: both
`invoke_agent` spans (the second linked to the first), the approval wait as a span from its
request to its decision, the `chat` spans with their GenAI attributes and the `execute_tool`
span of the approved call."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from outlive import tracing
from outlive.domain import Status
from tests.support.otlp import OtlpReceiver, ReceivedSpan, tracing_to
from tests.support.sessions import settled
from tests.support.waiting import eventually

TRACE = "0af7651916cd43dd8448eb211c80319c"
CALLER_SPAN = "b7ad6b7169203331"
CALLER = f"00-{TRACE}-{CALLER_SPAN}-01"


@pytest.fixture
def receiver() -> Iterator[OtlpReceiver]:
    r = OtlpReceiver().start()
    yield r
    r.close()


@pytest.fixture
def traced(receiver: OtlpReceiver, monkeypatch: pytest.MonkeyPatch) -> Iterator[OtlpReceiver]:
    with tracing_to(receiver, monkeypatch):
        yield receiver


def _children(spans: list[ReceivedSpan], parent: ReceivedSpan) -> list[ReceivedSpan]:
    return [s for s in spans if s.parent_span_id == parent.span_id]


async def test_a_run_that_waits_for_an_approval_is_one_trace_under_the_callers_span(
        store, workers, owner, traced: OtlpReceiver) -> None:
    await workers.start()
    s = await store.create_session(owner, agent="demo", model="demo:scripted",
                                   prompt="please send it", traceparent=CALLER)

    async def waiting() -> bool:
        return (await store.load_session(s.id)).attention == "approval"

    await eventually(waiting, 15, what="the approval request")
    asked = await store.load_session(s.id)
    first_run = asked.run_traceparent
    assert first_run is not None and first_run.startswith(f"00-{TRACE}-")
    (approval,) = await store.approvals(s.id)
    decided = await store.decide_approval(owner, s.id, approval.id, "approve")
    done = await settled(store, s.id)
    assert done.status is Status.SUCCEEDED
    await workers.close()
    tracing.shutdown()  # exports what the batch holds

    spans = [sp for sp in traced.spans if sp.trace_id == TRACE]
    assert {sp.trace_id for sp in traced.spans} == {TRACE}  # one trace, the caller's
    runs = sorted(traced.named("invoke_agent "), key=lambda sp: sp.start_ns)
    assert [r.name for r in runs] == ["invoke_agent demo", "invoke_agent demo"]
    assert all(r.parent_span_id == CALLER_SPAN for r in runs)
    assert [r.attributes["outlive.claim_reason"] for r in runs] == ["new", "handoff"]
    assert {r.attributes["outlive.session_id"] for r in runs} == {s.id}
    assert {r.attributes["gen_ai.conversation.id"] for r in runs} == {s.id}
    assert {r.attributes["outlive.owner"] for r in runs} == {owner}
    assert runs[0].span_id == first_run.split("-")[2]
    assert runs[0].links == []
    (link,) = runs[1].links
    assert (link.trace_id, link.span_id) == (TRACE, runs[0].span_id)
    assert all(r.status_code != 2 for r in runs)
    assert "outlive.status" not in runs[0].attributes  # it stopped to wait, unsettled
    assert runs[1].attributes["outlive.status"] == "succeeded"

    (wait,) = traced.named("await_approval ")
    assert wait.name == "await_approval send_message"
    assert wait.parent_span_id == runs[1].span_id
    assert wait.attributes["outlive.approval.decision"] == "approve"
    assert wait.attributes["gen_ai.tool.call.id"] == approval.call_id
    assert wait.start_ns == int(approval.requested_at.timestamp() * 1e9)
    assert decided.decided_at is not None
    assert wait.end_ns == int(decided.decided_at.timestamp() * 1e9)

    chats = [sp for sp in spans if sp.name.startswith("chat ")]
    assert len(chats) == 2  # the call that asked for the tool, and the answer after it
    assert [c.parent_span_id for c in sorted(chats, key=lambda c: c.start_ns)] == [
        runs[0].span_id, runs[1].span_id]
    for chat in chats:
        a = chat.attributes
        assert chat.name == f"chat {a['gen_ai.request.model']}"
        assert a["gen_ai.operation.name"] == "chat"
        assert a["gen_ai.provider.name"] == "demo"
        assert a["gen_ai.usage.input_tokens"] > 0 and a["gen_ai.usage.output_tokens"] > 0
        assert len(a["gen_ai.response.finish_reasons"]) == 1
        assert chat.kind == 3  # SPAN_KIND_CLIENT
    (tool,) = [sp for sp in _children(spans, runs[1]) if sp.name.startswith("execute_tool ")]
    assert tool.name == "execute_tool send_message"
    assert tool.attributes["gen_ai.tool.name"] == "send_message"
    assert tool.attributes["gen_ai.tool.call.id"] == approval.call_id
    assert tool.attributes["gen_ai.operation.name"] == "execute_tool"
    assert {sp.service for sp in spans} == {"outlive"}


async def test_the_wait_for_an_answer_is_a_span_of_the_run_the_answer_starts(
        store, workers, owner, traced: OtlpReceiver) -> None:
    await workers.start()
    s = await store.create_session(owner, agent="demo", model="demo:scripted",
                                   prompt="ask me something")
    asked = await settled(store, s.id)
    assert asked.attention == "question"
    posted = await store.post_message(owner, s.id, "the second one")
    done = await settled(store, s.id)
    assert done.status is Status.SUCCEEDED and done.attention is None
    await workers.close()
    tracing.shutdown()

    events = await store.read_events(s.id, limit=1000)
    (question,) = [e for e in events if e.type == "user_question"]
    (answer,) = [e for e in events if e.seq == posted.seq]
    first, second = sorted(traced.named("invoke_agent "), key=lambda sp: sp.start_ns)
    assert second.attributes["outlive.claim_reason"] == "follow_up"
    assert first.trace_id != second.trace_id  # a follow-up without a traceparent: its own
    (wait,) = traced.named("await_user ")
    assert wait.name == "await_user ask_user"
    assert (wait.trace_id, wait.parent_span_id) == (second.trace_id, second.span_id)
    assert wait.attributes["gen_ai.tool.call.id"] == question.data["call_id"]
    assert wait.start_ns == int(question.ts.timestamp() * 1e9)
    assert wait.end_ns == int(answer.ts.timestamp() * 1e9)


async def test_a_failed_tool_is_an_error_span_and_the_run_says_how_it_ended(
        store, workers, owner, traced: OtlpReceiver) -> None:
    await workers.start()
    s = await store.create_session(owner, agent="demo", model="demo:scripted",
                                   prompt="fail the tool please")
    done = await settled(store, s.id)
    assert done.status is Status.SUCCEEDED
    await workers.close()
    tracing.shutdown()
    (run,) = traced.named("invoke_agent ")
    assert run.attributes["outlive.status"] == "succeeded" and run.status_code != 2
    (tool,) = traced.named("execute_tool ")
    assert tool.parent_span_id == run.span_id
    assert tool.status_code == 2 and tool.attributes["error.type"] == "tool_error"


async def test_a_failed_model_call_is_an_error_span_and_its_retry_another(
        store, workers, owner, traced: OtlpReceiver) -> None:
    await workers.start()
    s = await store.create_session(owner, agent="demo", model="demo:scripted",
                                   prompt="provider error 1")
    done = await settled(store, s.id)
    assert done.status is Status.SUCCEEDED
    await workers.close()
    tracing.shutdown()
    (run,) = traced.named("invoke_agent ")
    failed, *answered = sorted(traced.named("chat "), key=lambda sp: sp.start_ns)
    assert answered, "the retry"
    assert {sp.parent_span_id for sp in (failed, *answered)} == {run.span_id}
    assert failed.status_code == 2
    assert failed.attributes["error.type"] == "TransientProviderError"
    assert "gen_ai.usage.output_tokens" not in failed.attributes
    for ok in answered:
        assert ok.status_code != 2 and ok.attributes["gen_ai.usage.output_tokens"] > 0
