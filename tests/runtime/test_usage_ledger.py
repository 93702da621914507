"""The usage ledger as a real worker writes it, on both databases (issue 31): a session with a
tool call, a follow-up and a manual compaction has one ledger row per model call that reached
its history (each answer, the summary), and its totals equal the sum of the `message_end`
usage in its log (plus the summarizer's); a run resumed after a crash numbers its calls under
its own attempt and the lost run's unfinished call is not counted; the process's counters
move with it."""

from __future__ import annotations

import asyncio
from decimal import Decimal

from prometheus_client import REGISTRY

from outlive.domain import NewEvent, Status
from outlive.domain.context import SUMMARY_KIND
from outlive.domain.usage import ledger_call
from tests.support.sessions import all_events, settled
from tests.support.waiting import eventually


def _metric(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


async def test_every_call_in_the_history_has_one_row_and_the_totals_are_their_sum(
    store, workers, owner
):
    before = _metric("outlive_model_calls_total", route="demo:scripted", model="scripted",
                     kind="model")
    s = await store.create_session(owner, agent="demo", model="demo:scripted", prompt="hi")
    await workers.start()
    assert (await settled(store, s.id)).status is Status.SUCCEEDED
    await store.post_message(owner, s.id, "and once more, please")
    assert (await settled(store, s.id)).status is Status.SUCCEEDED
    await store.request_compaction(owner, s.id)

    async def compacted() -> bool:
        got = await store.load_session(s.id)
        return not got.compact_requested and got.status is Status.SUCCEEDED

    await eventually(compacted, 15)

    entries = await store.read_entries(s.id)
    calls = [e for e in entries if ledger_call(e.kind, e.data) is not None]
    answers = [e for e in entries if e.kind == "assistant"]
    summaries = [e for e in entries if e.kind == SUMMARY_KIND and e.data.get("method") == "summary"]
    assert len(answers) >= 3 and summaries, [e.kind for e in entries]
    assert len(calls) == len(answers) + len(summaries)
    assert any(e.data["tool_calls"] for e in answers)  # the session had a tool call

    usage = await store.session_usage(owner, s.id)
    assert [r.entry_seq for r in usage.calls] == [e.seq for e in calls]
    assert [r.kind for r in usage.calls] == [
        "summary" if e.kind == SUMMARY_KIND else "model" for e in calls]
    assert {(r.route, r.agent, r.estimated, r.cost_usd) for r in usage.calls} == {
        ("demo:scripted", "demo", True, Decimal(0))}
    # each run (its fence) numbers its calls from 0; a follow-up starts the attempts again
    runs: dict[int, list[int]] = {}
    for r in usage.calls:
        runs.setdefault(r.fence, []).append(r.call_index)
        assert r.fence == next(e.fence for e in calls if e.seq == r.entry_seq)
    assert all(ix == list(range(len(ix))) for ix in runs.values()), runs
    assert len(runs) == 3  # the first run, the follow-up's, the compaction's
    assert {r.attempt for r in usage.calls} == {1}

    ends = [e.data["usage"] for e in await all_events(store, s.id)
            if e.type == "message_end" and e.data.get("usage")]
    assert len(ends) == len(answers)
    summary_use = [e.data["usage"] for e in summaries]
    t = usage.totals
    assert t.model_calls == len(ends) + len(summaries)
    assert t.input_tokens == sum(u["input_tokens"] for u in ends + summary_use)
    assert t.output_tokens == sum(u["output_tokens"] for u in ends + summary_use)
    assert t.input_tokens == sum(r.input_tokens for r in usage.calls)
    assert t.tool_calls == sum(1 for e in entries if e.kind == "tool_result") >= 1
    assert (t.cost_usd, t.unpriced_calls) == (Decimal(0), 0)
    assert (await store.load_session(s.id)).usage == t
    after = _metric("outlive_model_calls_total", route="demo:scripted", model="scripted",
                    kind="model")
    assert after - before == len(answers)


async def test_a_crashed_runs_unfinished_call_is_not_counted_and_the_next_run_is(
    store, workers, owner
):
    s = await store.create_session(owner, agent="demo", model="demo:scripted", prompt="hello")
    (ghost,) = await store.claim("ghost", limit=1, lease_ttl=0.05)
    assert ghost.lease is not None
    await store.append_events(s.id, [NewEvent("text_delta", {"message_id": "m1",
                                                             "text": "Half an ans"})],
                              lease=ghost.lease)
    await asyncio.sleep(0.3)
    await workers.start()
    assert (await settled(store, s.id)).status is Status.SUCCEEDED
    usage = await store.session_usage(owner, s.id)
    answers = [e for e in await store.read_entries(s.id) if e.kind == "assistant"]
    assert len(usage.calls) == len(answers) >= 1
    assert {r.attempt for r in usage.calls} == {2}  # the resumed run's, numbered from 0
    assert {r.fence for r in usage.calls} == {ghost.lease.fence + 1}
    assert [r.call_index for r in usage.calls] == list(range(len(answers)))
    assert usage.totals.model_calls == len(answers)
