"""The usage ledger (issue 31): one row per history entry that carries a model call, written by
the transaction that writes the entry (commit, group commit, settle, approval request), so a
refused write counts nothing; the session's running totals equal the sum of its rows; an
unknown price counts the tokens and not the cost; the owner's report over a period, grouped,
owner-scoped and kept through a purge."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest

from outlive.domain import InvalidInput, LeaseLost, NotFound, Status
from outlive.domain.approvals import ApprovalRequest
from outlive.domain.model import new_id
from outlive.domain.prices import cost_usd, lookup_price
from outlive.domain.usage import SessionUsage, UsageTotals, call_record, usage_record
from outlive.store import Commit, Settle
from tests.support.store_suite import claim_one, expire, held, new_owner, new_session


def answer(i: int, *, inp: int = 100, out: int = 20, cached: int = 0, reasoning: int = 0,
           cost: Decimal | None = Decimal("0.0005"), route: str = "openai:gpt-4o",
           model: str = "gpt-4o", calls: list[dict] | None = None) -> tuple[str, dict]:
    """An assistant entry as the runtime writes it: the answer, its usage and its call."""
    return "assistant", {
        "message_id": f"m{i}", "text": f"answer {i}", "stop_reason": "stop",
        "status": "complete", "tool_calls": calls or [],
        "usage": usage_record(inp, out, cached, reasoning),
        "call": call_record(route=route, model=model, attempt=1, index=i, latency_ms=40 + i,
                            cost=cost, estimated=False)}


def tool_result(call_id: str) -> tuple[str, dict]:
    return "tool_result", {"call_id": call_id, "name": "lookup", "ok": True, "result": "x",
                           "error": None, "duration_ms": 1}


def summed(u: SessionUsage) -> UsageTotals:
    """The totals the ledger rows add up to (tool calls are the session's alone)."""
    rows = u.calls
    return UsageTotals(
        model_calls=len(rows), tool_calls=u.totals.tool_calls,
        input_tokens=sum(r.input_tokens for r in rows),
        output_tokens=sum(r.output_tokens for r in rows),
        cached_input_tokens=sum(r.cached_input_tokens for r in rows),
        reasoning_tokens=sum(r.reasoning_tokens for r in rows),
        cost_usd=sum((r.cost_usd for r in rows if r.cost_usd is not None), Decimal(0)),
        unpriced_calls=sum(1 for r in rows if r.cost_usd is None))


async def test_a_commit_with_two_answers_makes_two_rows_and_totals_that_are_their_sum(store):
    owner = await new_owner(store)
    s, lease = await held(store, owner.id)
    entries, _ = await store.commit(lease, entries=[
        answer(0, inp=1200, out=80, cached=1000, reasoning=30, cost=Decimal("0.00123")),
        tool_result("c1"), ("user", {"text": "more", "seq": 9, "delivery": None}),
        answer(1, inp=1400, out=60, cost=Decimal("0.0041"))])
    got = await store.session_usage(owner.id, s.id)
    assert [(r.entry_seq, r.call_index, r.kind) for r in got.calls] == [
        (entries[0].seq, 0, "model"), (entries[3].seq, 1, "model")]
    first = got.calls[0]
    assert (first.route, first.model, first.agent, first.attempt) == (
        "openai:gpt-4o", "gpt-4o", "demo", 1)
    assert (first.input_tokens, first.output_tokens, first.cached_input_tokens,
            first.reasoning_tokens, first.latency_ms, first.estimated) == (
        1200, 80, 1000, 30, 40, False)
    assert first.cost_usd == Decimal("0.00123")
    assert got.totals == summed(got)
    assert got.totals.tool_calls == 1
    assert got.totals.cost_usd == Decimal("0.00533")
    assert (await store.get_session(owner.id, s.id)).usage == got.totals


async def test_a_refused_commit_writes_no_row_alone_or_grouped(store):
    owner = await new_owner(store)
    s, lease = await held(store, owner.id)
    await store.commit(lease, entries=[answer(0)])
    await expire(store, lease)
    taken = await claim_one(store, "w2")
    assert taken.lease is not None
    before = await store.session_usage(owner.id, s.id)
    with pytest.raises(LeaseLost):
        await store.commit(lease, entries=[answer(1), tool_result("c1")])
    [out] = await store.commit_many([Commit(lease, entries=[answer(2)])])
    assert isinstance(out, LeaseLost)
    with pytest.raises(LeaseLost):
        await store.settle(lease, Status.SUCCEEDED, entries=[answer(3)])
    assert await store.session_usage(owner.id, s.id) == before
    assert before.totals.model_calls == 1


async def test_an_unknown_price_counts_the_tokens_and_not_the_cost(store):
    owner = await new_owner(store)
    s, lease = await held(store, owner.id)
    await store.commit(lease, entries=[
        answer(0, inp=500, out=50, cost=None, route="ollama:llama3.2", model="llama3.2"),
        answer(1, inp=100, out=10, cost=Decimal("0.00025"))])
    got = await store.session_usage(owner.id, s.id)
    assert [r.cost_usd for r in got.calls] == [None, Decimal("0.00025")]
    assert got.totals.unpriced_calls == 1
    assert got.totals.input_tokens == 600 and got.totals.output_tokens == 60
    assert got.totals.cost_usd == Decimal("0.00025")
    assert got.totals == summed(got)


async def test_group_commits_settles_and_approval_requests_write_their_calls(store):
    owner = await new_owner(store)
    a, la = await held(store, owner.id)
    b, lb = await held(store, owner.id)
    c, lc = await held(store, owner.id)
    outs = await store.commit_many([
        Commit(la, entries=[answer(0), tool_result("c1")]),
        Settle(lb, Status.SUCCEEDED, entries=[answer(0, inp=7, out=3)]),
    ])
    assert not any(isinstance(o, Exception) for o in outs)
    await store.settle(la, Status.SUCCEEDED, entries=[answer(1, inp=9, out=1)])
    request = ApprovalRequest(new_id("apv"), "call_1", "send_email", {"to": "a@b.c"}, 60.0)
    calls = [{"call_id": "call_1", "name": "send_email", "arguments": {"to": "a@b.c"}}]
    assert await store.await_approval(lc, request, entries=[answer(0, calls=calls)])
    ua, ub, uc = [await store.session_usage(owner.id, x.id) for x in (a, b, c)]
    assert [len(u.calls) for u in (ua, ub, uc)] == [2, 1, 1]
    assert (ua.totals.model_calls, ua.totals.tool_calls, ua.totals.input_tokens) == (2, 1, 109)
    assert (ub.totals.input_tokens, ub.totals.output_tokens) == (7, 3)
    for u in (ua, ub, uc):
        assert u.totals == summed(u)


async def test_entries_without_a_call_count_nothing(store):
    """Answers written before the ledger, aborted ones and user messages have no `call`."""
    owner = await new_owner(store)
    s, lease = await held(store, owner.id)
    plain = ("assistant", {"message_id": "m", "text": "cut", "stop_reason": "cancelled",
                           "status": "cancelled", "tool_calls": []})
    await store.commit(lease, entries=[plain, ("user", {"text": "x", "seq": 1,
                                                        "delivery": None})])
    got = await store.session_usage(owner.id, s.id)
    assert got.calls == [] and got.totals == UsageTotals()


async def test_the_report_groups_an_owners_calls_and_sees_no_one_elses(store):
    owner, other = await new_owner(store), await new_owner(store)
    s1, l1 = await held(store, owner.id)
    await store.commit(l1, entries=[answer(0, inp=10, out=1, cost=Decimal("0.1")),
                                    answer(1, inp=20, out=2, cost=None,
                                           route="ollama:x", model="x")])
    s2 = await new_session(store, owner.id, agent="helper")
    c2 = await claim_one(store)
    assert c2.session.id == s2.id and c2.lease is not None
    await store.commit(c2.lease, entries=[answer(0, inp=40, out=4, cost=Decimal("0.2"))])
    _, l3 = await held(store, other.id)
    await store.commit(l3, entries=[answer(0, inp=1000, out=100)])
    now = datetime.now(UTC)
    lo, hi = now - timedelta(hours=1), now + timedelta(hours=1)
    by_model = await store.usage_report(owner.id, lo, hi, "model")
    assert [(g.key, g.totals.model_calls, g.totals.input_tokens, g.totals.cost_usd,
             g.totals.unpriced_calls) for g in by_model] == [
        ("ollama:x", 1, 20, Decimal(0), 1), ("openai:gpt-4o", 2, 50, Decimal("0.3"), 0)]
    by_agent = await store.usage_report(owner.id, lo, hi, "agent")
    assert [(g.key, g.totals.model_calls) for g in by_agent] == [("demo", 2), ("helper", 1)]
    by_session = await store.usage_report(owner.id, lo, hi, "session")
    assert sorted((g.key, g.totals.model_calls) for g in by_session) == sorted(
        [(s1.id, 2), (s2.id, 1)])
    [day] = await store.usage_report(owner.id, lo, hi, "day")
    assert day.totals.model_calls == 3 and day.totals.cost_usd == Decimal("0.3")
    assert day.key in {lo.strftime("%Y-%m-%d"), hi.strftime("%Y-%m-%d")}
    assert await store.usage_report(owner.id, hi, hi + timedelta(hours=1), "day") == []


async def test_bad_reports_and_foreign_sessions_are_refused(store):
    owner, other = await new_owner(store), await new_owner(store)
    s, _ = await held(store, owner.id)
    now = datetime.now(UTC)
    with pytest.raises(InvalidInput, match="group_by"):
        await store.usage_report(owner.id, now - timedelta(days=1), now, "week")
    with pytest.raises(InvalidInput, match="end after"):
        await store.usage_report(owner.id, now, now, "day")
    with pytest.raises(InvalidInput, match="time zone"):
        await store.usage_report(owner.id, datetime(2025, 1, 1), now, "day")
    with pytest.raises(NotFound):
        await store.session_usage(other.id, s.id)
    with pytest.raises(NotFound):
        await store.session_usage(owner.id, "ses_missing")


async def test_a_purged_sessions_calls_still_count_in_the_owners_report(store):
    owner = await new_owner(store)
    s, lease = await held(store, owner.id)
    await store.settle(lease, Status.SUCCEEDED, entries=[answer(0, inp=33, out=3)])
    await store.delete_session(owner.id, s.id, purge_in=0)
    assert await store.purge_session(s.id)
    with pytest.raises(NotFound):
        await store.session_usage(owner.id, s.id)
    now = datetime.now(UTC)
    [g] = await store.usage_report(owner.id, now - timedelta(hours=1), now + timedelta(hours=1),
                                   "session")
    assert (g.key, g.totals.input_tokens) == (s.id, 33)


async def test_costs_sum_exactly(store):
    """A thousand calls at a price with three decimals sum to the exact decimal, in the
    session's totals and in the report alike (integers of 10^-9 USD, never floats)."""
    owner = await new_owner(store)
    s, lease = await held(store, owner.id)
    price = lookup_price("gpt-4o-mini")
    one = cost_usd(1234, 567, 1000, price)
    assert one == Decimal("0.0004503")
    for start in range(0, 1000, 100):
        await store.commit(lease, entries=[answer(i, inp=1234, out=567, cached=1000, cost=one)
                                           for i in range(start, start + 100)])
    got = await store.session_usage(owner.id, s.id)
    assert got.totals.cost_usd == one * 1000 == Decimal("0.4503")
    now = datetime.now(UTC)
    [g] = await store.usage_report(owner.id, now - timedelta(hours=1), now + timedelta(hours=1),
                                   "day")
    assert g.totals.cost_usd == Decimal("0.4503")
