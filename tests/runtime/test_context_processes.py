"""Context compaction across `kill -9` (issue 30), with real `outlive worker` processes on a
real database (a SQLite file the processes share, and PostgreSQL).

The token-limited OpenAI-like server (tests/support/window_models.py) runs in the test
process and leaves every summarization request hanging. The worker, configured only by its
environment and an agents file as a user would, is killed with SIGKILL while it waits for
the summary; a second worker takes the session over once the lease lapses and asks for the
summary again, now answered. The conversation goes on to its 41st message, and nothing is
lost: every message answered and replayed, and exactly one summary for each prefix.
"""

from __future__ import annotations

import contextlib
import signal
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from outlive.domain import Status
from outlive.store import Store
from tests.runtime.test_context_windows import (
    AGENT,
    FOLLOW_UPS,
    WINDOW,
    assert_nothing_lost,
    message,
    settled_or_summarizing,
)
from tests.support.processes import Processes, WorkerProcess
from tests.support.sessions import all_events, event_appears, settled
from tests.support.window_models import OpenAIWindowServer

pytestmark = pytest.mark.slow

LEASE_TTL = 2.0
"""Lease time-to-live of the workers (heartbeat 0.5 s). Their claim scan runs every 0.2 s:
on a SQLite file it is how a worker process hears of a follow-up posted by another."""

AGENTS_TOML = f"""\
[agents.{AGENT.name}]
system_prompt = "{AGENT.system_prompt}"
model = "{AGENT.model}"
demo_tools = true
"""


@pytest.fixture
async def server() -> AsyncIterator[OpenAIWindowServer]:
    s = OpenAIWindowServer(WINDOW, hang_summaries=True)
    await s.start()
    yield s
    await s.close()


@pytest.fixture
def procs(request: pytest.FixtureRequest, db_url: str, server: OpenAIWindowServer,
          tmp_path: Path) -> Iterator[Processes]:
    """Worker processes whose `tiny:` route is `server`, its window configured by the
    environment; leftovers are killed, and their logs printed when the test failed."""
    ps = Processes(db_url, tmp_path, OUTLIVE_ROUTE_TINY=server.base_url,
                   OUTLIVE_ROUTE_TINY_API_KEY="x",
                   OUTLIVE_ROUTE_TINY_CONTEXT_WINDOW=str(WINDOW))
    failed_before = request.session.testsfailed
    try:
        yield ps
    finally:
        ps.close()
        if request.session.testsfailed > failed_before:
            capman = request.config.pluginmanager.getplugin("capturemanager")
            quiet = capman.global_and_fixture_disabled() if capman else contextlib.nullcontext()
            with quiet:
                sys.stderr.write(f"\n===== worker logs of {request.node.nodeid} =====\n"
                                 f"{ps.logs()}\n===== end of worker logs =====\n")


async def start_worker(procs: Processes, tmp_path: Path, name: str) -> WorkerProcess:
    agents = tmp_path / "agents.toml"
    agents.write_text(AGENTS_TOML)
    return await procs.start("--agents", str(agents), "--backstop", "0.2", name=name,
                             speed=0, lease_ttl=LEASE_TTL, heartbeat=0.5)


async def test_kill9_during_the_summarizer_call_resumes_with_one_summary_per_prefix(
    store: Store, owner: str, server: OpenAIWindowServer, procs: Processes, tmp_path: Path
) -> None:
    first = await start_worker(procs, tmp_path, "a")
    sid = (await store.create_session(owner, agent=AGENT.name, model=AGENT.model,
                                      prompt=message(0))).id
    i = 0  # the message whose run is in flight
    while not await settled_or_summarizing(store, sid, server):
        done = await store.load_session(sid)
        assert done.status is Status.SUCCEEDED, (i, done.error)
        i += 1
        assert i <= FOLLOW_UPS, "the history never needed a summary"
        await store.post_message(owner, sid, message(i))
    assert i >= 2, "a summary was due before the history had grown"
    held = await store.load_session(sid)
    assert held.status is Status.RUNNING and held.lease_worker == first.id
    first.kill9()
    assert await first.exited(5) == -signal.SIGKILL
    (hung,) = [x for x in server.requests if x.reason == "summary_hung"]
    before = await store.read_entries(sid)
    assert not [e for e in before if e.kind == "summary" and e.data["method"] != "trim"]

    server.hang_summaries = False
    second = await start_worker(procs, tmp_path, "b")
    resumed = await event_appears(store, sid, "session_resumed", timeout=LEASE_TTL + 15)
    assert resumed.data["reason"] == "crash"
    done = await settled(store, sid, timeout=30)
    assert done.status is Status.SUCCEEDED, done.error
    assert f"runs {sid} (crash" in second.log()
    # The summary the dead worker waited for was asked for again, of the same history, and
    # answered; the second worker committed it, once.
    asked_again = server.summaries[0]
    assert server.requests.index(asked_again) > server.requests.index(hung)
    assert asked_again.turns == hung.turns
    for j in range(i + 1, FOLLOW_UPS + 1):
        posted = await store.post_message(owner, sid, message(j))
        assert posted.requeued
        done = await settled(store, sid, timeout=30)
        assert done.status is Status.SUCCEEDED, (j, done.error)

    await assert_nothing_lost(store, sid, server)  # with one summary per prefix
    entries = [e for e in await store.read_entries(sid) if e.kind == "summary"]
    cuts = [e for e in entries if e.data["method"] != "trim"]
    assert cuts[0].data["method"] == "summary" and cuts[0].fence == resumed.fence
    assert all(e.fence > held.fence for e in cuts)  # the dead worker committed none
    events = await all_events(store, sid)
    assert not [e for e in events if e.type == "session_end"
                and e.data.get("status") != "succeeded"]
