"""How many database calls a turn costs: the worker's throughput is set by this number.

The store here is the real one, wrapped only to count the calls the worker makes on it.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from outlive.domain import Status
from tests.support.sessions import all_events, settled

WRITES = {"commit", "commit_many", "settle", "append_events", "append_entries", "set_auto_title",
          "mark_delivered", "set_stage", "park"}
READS = {"load_session", "undelivered_inputs", "read_entries", "read_events"}


class CountingStore:
    def __init__(self, store: Any) -> None:
        self._store = store
        self.calls: Counter[str] = Counter()

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._store, name)
        if name in WRITES | READS:
            async def counted(*args: Any, **kwargs: Any) -> Any:
                self.calls[name] += 1
                return await attr(*args, **kwargs)
            return counted
        return attr


async def test_a_demo_session_costs_one_write_per_step(store, workers, owner):
    """'hi' is 2 model turns and 1 tool call: its 10 non-delta events are written by the
    claim (session_start), the turn starts (the first with the title), the tool start (with
    the model's answer), and the settle (with the final answer). The claim reads the waiting
    prompt in its own transaction, so the run reads nothing."""
    counting = CountingStore(store)
    s = await store.create_session(owner, agent="demo", model="demo:scripted", prompt="hi")
    await workers.start(store=counting)
    done = await settled(store, s.id)
    assert done.status is Status.SUCCEEDED
    events = await all_events(store, s.id)
    assert [e.type for e in events if e.type != "text_delta"] == [
        "user_message", "session_start", "turn_start", "title", "message_end", "tool_start",
        "tool_end", "turn_start", "message_end", "session_end",
    ]
    writes = {k: v for k, v in counting.calls.items() if k in WRITES}
    reads = {k: v for k, v in counting.calls.items() if k in READS}
    # the worker's commits go through its group committer: alone, one item each
    assert writes == {"commit_many": 3, "settle": 1}, writes
    assert reads == {}, reads
