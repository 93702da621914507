"""The local model takes part in context compaction: a session on `local:smollm2` (the real
135M model, in process) keeps answering follow-ups past its window, measured by the model's
own tokenizer, summarized by the model itself, and never refused for length.

The window is the agent's (`context_window`), a quarter of the 2,048 tokens the model runs
with: on the two-core machines this runs on the model processes some 30 tokens a second,
prompt or answer alike, so filling 2,048 tokens and summarizing them twice would take
several minutes; at 512 tokens the test takes under 2 minutes of CPU (the provider's own
window and count are checked against the real n_ctx in tests/providers/test_local.py).
"""

from __future__ import annotations

import itertools
import time

from outlive.domain import Status
from outlive.domain.context import SUMMARY_KIND
from outlive.providers._config import configured_registry
from outlive.runtime import Agent, AgentRegistry
from outlive.store import Store
from tests.providers.test_local import model_installed, needs_model  # noqa: F401  (its fixture)
from tests.support.inprocess import Workers
from tests.support.sessions import all_events, settled

DATABASES = ("sqlite",)

WINDOW = 512
FOLLOW_UPS = 30

AGENT = Agent(name="tiny", system_prompt="You are a helpful assistant. Reply with one word only.",
              model="local:smollm2", max_tokens=48, context_window=WINDOW)
"""Short answers, so the test spends its time on compaction: the model stops after a few
tokens, well before `max_tokens` (a stop at the limit fails the run as incomplete), and the
history grows by ~25 tokens a follow-up."""

THINGS = ("fruit", "colour", "animal", "country", "tree", "city", "flower", "river")


def message(i: int) -> str:
    return f"Question {i}: name one {THINGS[i % len(THINGS)]}."


@needs_model
async def test_a_local_session_outlives_its_window(store: Store, workers: Workers,
                                                   owner: str) -> None:
    t0 = time.monotonic()
    await workers.start(agents=AgentRegistry([AGENT]), providers=configured_registry(environ={}))
    sid = (await store.create_session(owner, agent=AGENT.name, model=AGENT.model,
                                      prompt=message(0))).id
    done = await settled(store, sid, timeout=120)  # loads the model first
    assert done.status is Status.SUCCEEDED, done.error
    for i in range(1, FOLLOW_UPS + 1):
        assert (await store.post_message(owner, sid, message(i))).requeued
        done = await settled(store, sid, timeout=90)
        assert done.status is Status.SUCCEEDED, (i, done.error)
    took = time.monotonic() - t0

    events = await all_events(store, sid)
    assert [e.data["text"] for e in events if e.type == "user_message"] == [
        message(i) for i in range(FOLLOW_UPS + 1)]
    answers = [e.data["text"] for e in events if e.type == "message_end"]
    assert len(answers) == FOLLOW_UPS + 1 and all(a.strip() for a in answers)
    # never refused for length: the model's own count kept every request inside
    assert not [e for e in events if e.type == "error"]
    entries = await store.read_entries(sid)
    summaries = [e.data for e in entries if e.kind == SUMMARY_KIND]
    assert len(summaries) >= 2, summaries
    # written by the model itself (not the marked truncation a failed summarizer leaves)
    assert all(s["method"] == "summary" and s["route"] == "local:smollm2" and s["text"].strip()
               for s in summaries)
    used = [e.data["usage"] for e in entries if e.kind == "assistant"]
    assert len(used) == FOLLOW_UPS + 1
    assert max(u["input_tokens"] + u["output_tokens"] for u in used) <= WINDOW
    # and the history itself outgrew the window: the requests shrank at each summary
    inputs = [u["input_tokens"] for u in used]
    assert sum(1 for a, b in itertools.pairwise(inputs) if b < a) == len(summaries)
    assert inputs[-1] + sum(a - b for a, b in itertools.pairwise(inputs)
                            if b < a) > WINDOW
    print(f"\n{FOLLOW_UPS} follow-ups on local:smollm2 in {took:.1f}s, "
          f"{len(summaries)} compactions, largest request "
          f"{max(u['input_tokens'] for u in used)} tokens")
