"""The demo agent's words and texts: the tool names it calls, the words it reacts to, and
the answers it streams (the script that picks among them is `_demo_script`)."""

from __future__ import annotations

from typing import Literal

__all__ = [
    "ASK_USER",
    "CALLS_OFF",
    "COUNTER",
    "DELEGATE",
    "DEMO_TOOLS",
    "DEMO_WORDS",
    "FLAKY",
    "HELPER_AGENT",
    "HINT",
    "LONG_PARAGRAPHS",
    "LOOKUP",
    "MARKDOWN_ANSWER",
    "OPTIONS",
    "QUESTION",
    "REMIND_SECONDS",
    "SEND",
    "SLOW_SECONDS",
    "SLOW_TASK",
    "SUBTASK_PREFIX",
    "SUBTASK_SLOW_SECONDS",
    "WAKEUP",
    "CallScope",
]

LOOKUP = "lookup"
SLOW_TASK = "slow_task"
FLAKY = "flaky"
COUNTER = "counter"
SEND = "send_message"
ASK_USER = "ask_user"
WAKEUP = "schedule_wakeup"
HELPER_AGENT = "helper"
"""The demo sub-agent that "delegate" hands its two sub-tasks to."""
DELEGATE = "agent__" + HELPER_AGENT
SUBTASK_PREFIX = "Sub-task "
"""How a delegated task starts: the helper's script keys on it, before any demo word."""
SUBTASK_SLOW_SECONDS = 3.0
"""The helper's one slow_task call: with its two texts a child runs about 10 s at speed 1."""
REMIND_SECONDS = 3
"""How far ahead "remind me" asks to be woken."""

DEMO_WORDS = ("run long", "ask me", "fail a tool", "think", "count", "send it", "length",
              "markdown", "remind me", "delegate", "delegate and forget", "provider error",
              "call")
"""Every word the demo model reacts to (the scenarios below, `DemoProvider`'s provider
errors, and `call <tool> {json}`): the one list hints are made from."""

HINT = (
    "Ask me to " + ", ".join(f"“{w}”" for w in DEMO_WORDS[:-1]) + f" or “{DEMO_WORDS[-1]}” "
    "to see the other demo behaviours."
)

LONG_PARAGRAPHS = (
    "This is the long demo answer. It streams for about half a minute, in small pieces, so "
    "there is time to try things while it runs: close the tab, reload the page, open the same "
    "session in a second window, or stop the worker that is running it. None of that should "
    "change what you finally read here.",
    "Everything you see arrives as numbered events. Each piece of text is stored before it "
    "reaches your screen, and each event has a sequence number, so a reconnecting browser asks "
    "for everything after the last number it saw. Nothing is skipped and nothing is shown "
    "twice, however often the connection drops.",
    "The session does not live in this page or in the worker process. It lives in the "
    "database: its status, its lease, its history and its event log. A worker only borrows it "
    "for a while, under a lease that it renews every couple of seconds while it works.",
    "While the slow task ran, its progress messages were stored as events too. If you reload "
    "now, the tool card comes back with its progress and its result, rebuilt from the same "
    "event log that the live stream delivered a moment ago.",
    "If the worker dies in the middle of a step, its lease expires after a few seconds and "
    "another worker claims the session. The new worker bumps a fence number first, so the old "
    "one, should it wake up again, cannot write a single event. The history is repaired, then "
    "the work carries on.",
    "A tool call that was cut off by a crash gets an honest receipt: it is marked as "
    "interrupted, never as a success. Tools that declare themselves idempotent are run again "
    "with the same idempotency key instead, so they can recognise the repeat and skip the "
    "duplicate work.",
    "Try sending a follow-up message while this text is still streaming. By default it steers: "
    "it is delivered at the next safe point, before the model is called again, and it is never "
    "lost, even if a worker crashes in between.",
    "You can also cancel. The cancel request is written once, the worker is woken at once, and "
    "the model call and any running tool are aborted immediately rather than at the next poll. "
    "The partial answer is kept and marked as cancelled, so you can still read what was "
    "written.",
    "The page keeps a live list of your sessions from a second stream, the owner stream. It "
    "also fetches the full list now and then, with a little random jitter, so that even if an "
    "event went missing the list heals itself within a minute.",
    "Long answers like this one are ordinary text deltas. They are coalesced before being "
    "stored, at most every fifty milliseconds or every kilobyte, which keeps the event log "
    "compact without making the stream feel slow to the person reading it.",
    "When the answer ends, the full text is stored once more in a single message end event. "
    "That copy is authoritative: a client that missed deltas, or joined late, can trust it and "
    "replace whatever it assembled from the pieces.",
    "That is nearly the end. If you reloaded, switched tabs or restarted a worker while "
    "reading, the text above should still be complete, in order, and free of repeats. That is "
    "the whole point of the exercise.",
    "Thanks for sitting through the long demo. Send another message to continue this session, "
    "or start a new one with “ask me”, “fail a tool”, “think” or “count” to see the other "
    "behaviours.",
)

QUESTION = "Which kind of answer would you like?"
OPTIONS = ["A short summary", "A detailed walkthrough", "Just the numbers"]
SLOW_SECONDS = 8.0

MARKDOWN_ANSWER = """## Durable sessions, in short

A session **outlives** the request, the tab and the worker:

1. the database owns it (lease, fence, event log);
2. workers *borrow* it under a lease;
3. clients resume from the last `seq` they saw.

| part | keeps | lost on a crash |
|---|---|---:|
| database | status, history, events | nothing |
| worker | the model call in flight | one step |

```python
async for item in client.stream(session_id, until_end=True):
    print(item.seq, item.type)  # gapless, never repeated
```

> A cancel keeps the partial answer, marked `cancelled`.

- [x] stream
- [ ] reconnect

More in [the architecture notes](https://example.com/outlive/architecture)."""

DEMO_TOOLS = frozenset({LOOKUP, SLOW_TASK, FLAKY, COUNTER, SEND, ASK_USER})
"""The built-in demo agent's own tools (tools/demo.py): harmless, so `call` may run them."""

CallScope = Literal["none", "demo", "all"]
"""Which tools `call <tool> {json}` may run: none, the demo agent's own (`DEMO_TOOLS`, for the
built-in demo agent), or every tool of the agent (`--demo-calls`)."""

CALLS_OFF = (
    "Calling `{name}` by name is off on this server: with it, anyone holding an API key could "
    "run any tool of this agent. The built-in `demo` agent's own tools are always allowed; for "
    "any other tool start the server (or worker) with `--demo-calls` (or OUTLIVE_DEMO_CALLS=1)."
)
