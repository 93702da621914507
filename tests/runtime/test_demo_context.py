"""The demo model takes part in context compaction: with a small window on its route (what
`OUTLIVE_ROUTE_DEMO_CONTEXT_WINDOW=1500 make run` sets), a session on a real worker keeps
answering follow-ups long after its history outgrew the window, the demo model itself writes
the summaries, and what it reports it was sent (its usage, in words) never passes the window.
"""

from __future__ import annotations

from outlive.domain import Status
from outlive.domain.context import SUMMARY_KIND
from outlive.providers import default_registry
from outlive.providers._config import RouteConfig, apply_routes
from outlive.providers._demo_summary import HEADER
from outlive.runtime import AgentRegistry, demo_agent
from outlive.store import Store
from tests.support.inprocess import Workers
from tests.support.sessions import all_events, settled

WINDOW = 1500
"""Words, the demo's unit: its system prompt and tool schemas take ~300, a follow-up and
its answer around a lookup ~150, so the history outgrows it after about six."""

FOLLOW_UPS = 32


def message(i: int) -> str:
    if i % 4 == 3:
        return f"question {i}: think about leases and fences, part {i}"
    return f"question {i}: tell me more about gates and write budgets, part {i}"


async def test_a_demo_session_outlives_its_window(store: Store, workers: Workers,
                                                  owner: str) -> None:
    providers = apply_routes(default_registry(demo_speed=0),
                             {"demo": RouteConfig("demo", builtin=True, context_window=WINDOW)})
    agent = demo_agent(0)
    await workers.start(agents=AgentRegistry([agent]), providers=providers)
    sid = (await store.create_session(owner, agent=agent.name, model=agent.model,
                                      prompt=message(0))).id
    done = await settled(store, sid, timeout=30)
    assert done.status is Status.SUCCEEDED, done.error
    for i in range(1, FOLLOW_UPS + 1):
        assert (await store.post_message(owner, sid, message(i))).requeued
        done = await settled(store, sid, timeout=30)
        assert done.status is Status.SUCCEEDED, (i, done.error)

    events = await all_events(store, sid)
    answers = [e.data["text"] for e in events if e.type == "message_end"
               and e.data["text"].startswith("Here is what I found:")]
    assert len(answers) == FOLLOW_UPS + 1  # every message answered, after its lookup
    assert [e.data["text"] for e in events if e.type == "user_message"] == [
        message(i) for i in range(FOLLOW_UPS + 1)]

    entries = await store.read_entries(sid)
    summaries = [e for e in entries if e.kind == SUMMARY_KIND]
    assert len(summaries) >= 3
    assert all(s.data["method"] == "summary" for s in summaries)
    newest = summaries[-1].data["text"]
    assert newest.startswith(HEADER) and "earlier ones left out" in newest
    # The summary is the demo's own: the first words of the user's messages, in order, the
    # newest it covers included.
    covered = [e for e in entries if e.kind == "user" and e.seq <= summaries[-1].data["through"]]
    last_covered = " ".join(covered[-1].data["text"].split()[:12])
    assert newest.splitlines()[-1].startswith(f"- {last_covered}")
    compacted = [e for e in events if e.type == "context_compacted"]
    assert len(compacted) == len(summaries)
    # once per run at most: a view just compacted is measured in the demo's words too, not
    # by the bare estimate, which counts about twice as many and would compact it again
    per_run = [0]
    for e in events:
        if e.type == "user_message":
            per_run.append(0)
        elif e.type == "context_compacted":
            per_run[-1] += 1
    assert max(per_run) == 1, per_run
    assert all(e.data["window"] == WINDOW for e in compacted)

    # What the model says it was sent, its answer included, always fit the window.
    used = [e.data["usage"] for e in entries if e.kind == "assistant" and "usage" in e.data]
    assert len(used) == 2 * (FOLLOW_UPS + 1)
    biggest = max(u["input_tokens"] + u["output_tokens"] for u in used)
    assert biggest <= WINDOW, biggest
    # and without compaction it would not have: the history alone outgrew it several times
    words = sum(len(str(e.data.get("text", "")).split()) for e in entries
                if e.kind in ("user", "assistant"))
    assert words > 2 * WINDOW
