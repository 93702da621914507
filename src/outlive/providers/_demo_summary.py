"""The demo model as a summarizer: a deterministic summary of the conversation it is shown.

When the runtime compacts a session's context (docs/context.md) it asks the session's model
for a summary (`settings.extra["purpose"] == "summary"`), in a request of its own: the
summarizer prompt, then one user message holding the summary so far and a transcript of the
turns to add (`runtime.context.render_transcript`: `User: …`, `Assistant: …`,
`Assistant called name({…})`, `Tool name returned: …` lines). The demo cannot understand a
conversation, but it can keep what a reader of the summary needs most: what the user asked,
in order, and which tools answered. One item per user message (its first words), newest
kept when the budget runs out, with a count of what was left out, so a long demo session
shows a summary that is both honest and bounded.
"""

from __future__ import annotations

import re

from ._port import Message

__all__ = ["HEADER", "ITEM_WORDS", "summarize"]

ITEM_WORDS = 12
"""Words kept of each user message."""

HEADER = "What the user asked so far, oldest first"
_PRIOR = "The summary so far:\n"
_NEW = "The conversation to add to it:\n"
_LEFT_OUT = re.compile(r"\((\d+) earlier (?:ones?|requests?) left out\)")
_CALLED = re.compile(r"^Assistant called ([A-Za-z0-9_.-]+)\(")


def summarize(messages: list[Message], max_words: int | None) -> str:
    """The summary the demo model writes for a summarizer request: the summary so far and
    the transcript's user messages, as items of at most `ITEM_WORDS` words each, at most
    `max_words` words in all (oldest items dropped first)."""
    request = next((m.text for m in reversed(messages) if m.role == "user"), "")
    prior, transcript = _split(request)
    left_out, items = _prior_items(prior)
    items += _new_items(transcript)
    budget = max(max_words or 1024, 2 * ITEM_WORDS)
    while items and _words(left_out, items) > budget:
        items.pop(0)
        left_out += 1
    if not items:
        return f"{HEADER}: nothing yet."
    head = f"{HEADER} ({left_out} earlier ones left out):" if left_out else f"{HEADER}:"
    return "\n".join([head, *(f"- {item}" for item in items)])


def _split(request: str) -> tuple[str, str]:
    """(the summary so far, the transcript) of a summarizer request."""
    prior = ""
    if request.startswith(_PRIOR):
        prior, _, request = request[len(_PRIOR):].partition("\n\n" + _NEW)
        return prior, request
    head, sep, rest = request.partition(_NEW)
    return prior, rest if sep else head


def _prior_items(prior: str) -> tuple[int, list[str]]:
    """What a summary so far says: its count of left-out items and its items (a summary
    the demo did not write, e.g. after a route change, is kept line by line, shortened)."""
    left_out = 0
    items: list[str] = []
    for line in prior.splitlines():
        line = line.strip()
        if not line:
            continue
        if line.startswith(HEADER):
            found = _LEFT_OUT.search(line)
            left_out += int(found.group(1)) if found else 0
        elif line.startswith("- "):
            items.append(line[2:])
        else:
            items.append(_clip(line))
    return left_out, items


def _new_items(transcript: str) -> list[str]:
    """One item per `User:` line of the transcript, with the tools called after it."""
    items: list[str] = []
    tools: list[list[str]] = []
    for line in transcript.splitlines():
        if line.startswith("User: "):
            items.append(_clip(line[len("User: "):]))
            tools.append([])
        elif tools and (called := _CALLED.match(line)) is not None:
            if called.group(1) not in tools[-1]:
                tools[-1].append(called.group(1))
    return [f"{item} (tools: {', '.join(used)})" if used else item
            for item, used in zip(items, tools, strict=True)]


def _clip(text: str) -> str:
    words = text.split()
    if len(words) <= ITEM_WORDS:
        return " ".join(words) or "(an empty message)"
    return " ".join(words[:ITEM_WORDS]) + " …"


def _words(left_out: int, items: list[str]) -> int:
    head = len(HEADER.split()) + (4 if left_out else 0)
    return head + sum(len(item.split()) + 1 for item in items)
