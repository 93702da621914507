"""The local model takes part in context compaction (issue 30's acceptance, "with the real
local model"): a session on `local:smollm2` (the real 135M model, in process) answers 40
follow-ups with tool calls mixed in past the model's own window, measured by the model's own
tokenizer, summarized by the model itself, never refused for length, and no compaction cuts
a tool call from its result.

The window is the model's: the `local` route's `context_window` is the n_ctx llama.cpp
loads the model with, so a request over it would be the model's own refusal. It is 1,024,
half the default: on the two-core machines this runs on the model processes some 30 tokens a
second, so filling 2,048 tokens and summarizing them more than once would take minutes; at
1,024 the test takes some 80 s alone and twice that beside the rest of the suite, so it has
a longer timeout than the suite's 300 s (the provider's window and count at the default
n_ctx are checked in tests/providers/test_local.py).
"""

from __future__ import annotations

import itertools
import time

import pytest

from outlive.domain import Status
from outlive.domain.context import SUMMARY_KIND, valid_cuts
from outlive.providers._config import configured_registry
from outlive.runtime import Agent, AgentRegistry
from outlive.store import Store
from outlive.tools import demo_tools
from tests.providers.test_local import model_installed, needs_model  # noqa: F401  (its fixture)
from tests.support.context_checks import assert_one_summary_per_prefix
from tests.support.inprocess import Workers
from tests.support.sessions import all_events, settled

DATABASES = ("sqlite",)

N_CTX = 1024
FOLLOW_UPS = 40
TOOL_EVERY = 10
"""Every tenth message asks for the lookup tool: the model then calls it (its JSON is
constrained to the tool's schema, its arguments are its own) and answers from the result."""

AGENT = Agent(name="tiny", system_prompt="You are a helpful assistant. Reply with one word only.",
              model="local:smollm2", max_tokens=128, tools=demo_tools(0))
"""Short answers, so the test spends its time on compaction: the model stops after a few
tokens, well before `max_tokens` (a stop at the limit fails the run as incomplete), and the
history grows by ~25 tokens a follow-up, more with a tool call."""

THINGS = ("fruit", "colour", "animal", "country", "tree", "city", "flower", "river")


def message(i: int) -> str:
    if i % TOOL_EVERY == TOOL_EVERY - 1:
        return f"Question {i}: use the lookup tool to look up topic {i}."
    return f"Question {i}: name one {THINGS[i % len(THINGS)]}. One word only."


@needs_model
@pytest.mark.timeout(600)
async def test_a_local_session_outlives_its_window(store: Store, workers: Workers,
                                                   owner: str) -> None:
    t0 = time.monotonic()
    providers = configured_registry(environ={"OUTLIVE_ROUTE_LOCAL_CONTEXT_WINDOW": str(N_CTX)})
    await workers.start(agents=AgentRegistry([AGENT]), providers=providers)
    sid = (await store.create_session(owner, agent=AGENT.name, model=AGENT.model,
                                      prompt=message(0))).id
    done = await settled(store, sid, timeout=120)  # loads the model first
    assert done.status is Status.SUCCEEDED, done.error
    for i in range(1, FOLLOW_UPS + 1):
        assert (await store.post_message(owner, sid, message(i))).requeued
        done = await settled(store, sid, timeout=90)
        assert done.status is Status.SUCCEEDED, (i, done.error)
    took = time.monotonic() - t0
    provider = providers.resolve(AGENT.model)[0]
    assert provider.context_window("smollm2") == N_CTX  # the n_ctx the model runs with

    events = await all_events(store, sid)
    # never refused for length: the model's own count kept every request inside
    assert not [e for e in events if e.type == "error"]
    tool_turns = [i for i in range(FOLLOW_UPS + 1) if i % TOOL_EVERY == TOOL_EVERY - 1]
    ends = [e for e in events if e.type == "tool_end"]
    assert len(ends) == len(tool_turns) and all(e.data["ok"] for e in ends)
    # every message answered in text: one answer per plain message, two per tool message
    # (the call, then the answer from its result)
    answers = [e.data["text"] for e in events if e.type == "message_end"]
    assert len(answers) == FOLLOW_UPS + 1 + len(tool_turns)

    entries = await store.read_entries(sid)
    summaries = await assert_one_summary_per_prefix(store, sid)
    assert len(summaries) >= 2, [s.data for s in summaries]
    # written by the model itself (not the marked truncation a failed summarizer leaves)
    assert all(s.data["method"] == "summary" and s.data["route"] == "local:smollm2"
               and s.data["text"].strip() for s in summaries)
    # no summary cut a tool call from its result: each cut was a valid one of the history
    # as it stood when the summary was written
    for s in summaries:
        before = [e for e in entries if e.seq < s.seq and e.kind != SUMMARY_KIND]
        covered = [e.seq for e in before].index(s.data["through"]) + 1
        assert covered in valid_cuts(before), (s.data, [e.kind for e in before])
    used = [e.data["usage"] for e in entries if e.kind == "assistant"]
    assert len(used) == len(answers)
    assert max(u["input_tokens"] + u["output_tokens"] for u in used) <= N_CTX
    # and the history itself outgrew the window: the requests shrank at each summary
    inputs = [u["input_tokens"] for u in used]
    assert inputs[-1] + sum(a - b for a, b in itertools.pairwise(inputs) if b < a) > N_CTX
    print(f"\n{FOLLOW_UPS} follow-ups ({len(tool_turns)} with a tool call) on local:smollm2 "
          f"at n_ctx {N_CTX} in {took:.1f}s, {len(summaries)} compactions, largest request "
          f"{max(u['input_tokens'] for u in used)} tokens")
