"""Branches (docs/branches.md): where a fork may cut a session's logs, and its siblings.

A fork copies a prefix of its parent's event log (events 1..seq, seqs kept) and of its model
history (entries 1..n). The two must tell the same story, so a fork cuts only at a *settled
point*: the event that committed a history entry, where every tool call of the history has
its result in it, every user message of the log so far is in it (or was dropped by a
cancel), and the history does not end on a user message nobody answered. A requested seq
that is no settled point moves back to the nearest one before it: never a cut between a
call and its result, never an answer the model would not know it gave.

Entries and events are written in the same transactions, so each entry's *anchor* (the
event committed with it) is found by its ids: a user entry's `turn_start`, an answer's
`message_end`, a result's `tool_end` (or the `user_question` of an `ask_user` call), a
summary's `context_compacted`. An entry written with no event of its own (the results of
calls an interrupt kept from starting) shares the anchor of the entry before it.
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .errors import InvalidInput
from .model import Entry, Event

__all__ = ["BranchPoint", "ForkCut", "ForkNode", "branch_points", "fork_cut", "settled_cuts"]

_RESULT_EVENTS = ("tool_end", "user_question")


@dataclass(frozen=True)
class ForkCut:
    """A settled point of a session: its events 1..`seq` and entries 1..`entries`."""

    seq: int
    entries: int
    last_input: int
    """Seq of the newest user message at or before `seq` (0: none): all delivered."""


def _anchors(events: Sequence[Event], entries: Sequence[Entry]) -> list[int]:
    turns = sorted(e.seq for e in events if e.type == "turn_start")
    ends: dict[str, int] = {}
    results: dict[str, int] = {}
    compactions = [e.seq for e in events if e.type == "context_compacted"]
    for e in events:
        if e.type == "message_end":
            ends.setdefault(str(e.data.get("message_id")), e.seq)
        elif e.type in _RESULT_EVENTS and e.data.get("call_id") is not None:
            results[str(e.data["call_id"])] = e.seq
    never = 2**62
    out: list[int] = []
    prev, summaries = 0, 0
    for en in entries:
        anchor: int | None = None
        if en.kind == "user":
            at = bisect.bisect_right(turns, _int(en.data.get("seq")))
            anchor = turns[at] if at < len(turns) else never
        elif en.kind == "assistant":
            anchor = ends.get(str(en.data.get("message_id")), never)
        elif en.kind == "tool_result":
            anchor = results.get(str(en.data.get("call_id")))
        elif en.kind == "summary":
            anchor = compactions[summaries] if summaries < len(compactions) else never
            summaries += 1
        prev = max(prev, prev if anchor is None else anchor)
        out.append(prev)
    return out


def settled_cuts(events: Sequence[Event], entries: Sequence[Entry]) -> list[ForkCut]:
    """Every settled point of a session, oldest first (seq 0, the empty session, first).
    `events`: its log (text deltas may be left out), `entries`: its whole history."""
    anchors = _anchors(events, entries)
    messages = sorted(e.seq for e in events if e.type == "user_message")
    dropped = {s for e in events if e.type == "session_end"
               for s in (e.data.get("dropped_inputs") or []) if isinstance(s, int)}
    forks = [e.seq for e in events if e.type == "forked"]
    cuts = [ForkCut(0, 0, 0)]
    delivered: set[int] = set()
    waiting: set[int] = set()
    open_calls: set[str] = set()
    passed = 0  # messages[:passed] are at or before the current anchor
    last_kind = ""
    for j, en in enumerate(entries):
        if en.kind == "user":
            seq = _int(en.data.get("seq"))
            delivered.add(seq)
            waiting.discard(seq)
        elif en.kind == "assistant":
            open_calls.update(str(c.get("call_id")) for c in en.data.get("tool_calls") or []
                              if isinstance(c, Mapping))
        elif en.kind == "tool_result":
            open_calls.discard(str(en.data.get("call_id")))
        if en.kind != "summary":
            last_kind = en.kind
        at = anchors[j]
        while passed < len(messages) and messages[passed] <= at:
            if messages[passed] not in delivered and messages[passed] not in dropped:
                waiting.add(messages[passed])
            passed += 1
        settled = not open_calls and not waiting and last_kind in ("assistant", "tool_result")
        if settled and at < 2**62 and (j + 1 == len(entries) or anchors[j + 1] > at):
            last = messages[passed - 1] if passed else 0
            cuts.append(ForkCut(at, j + 1, last))
            # A fork's own marker is where its history stands as copied.
    for seq in forks:
        before = [c for c in cuts if c.seq < seq]
        if before:
            base = before[-1]
            cuts.append(ForkCut(seq, base.entries, base.last_input))
    cuts.sort(key=lambda c: (c.seq, c.entries))
    return cuts


def fork_cut(events: Sequence[Event], entries: Sequence[Entry], *, at_seq: int | None = None,
             before_message: int | None = None, last_seq: int) -> ForkCut:
    """The settled point a fork asked for at `at_seq` (or just before the user message at
    seq `before_message`) cuts at: the newest at or before it."""
    if (at_seq is None) == (before_message is None):
        raise InvalidInput("give exactly one of at_seq and before_message")
    if before_message is not None:
        if not any(e.seq == before_message and e.type == "user_message" for e in events):
            raise InvalidInput(f"event {before_message} is not a user message of this session")
        wanted = before_message - 1
    else:
        assert at_seq is not None
        wanted = at_seq
    if wanted < 0 or wanted > last_seq:
        raise InvalidInput(f"at_seq must be between 0 and {last_seq}, the session's last seq")
    cuts = [c for c in settled_cuts(events, entries) if c.seq <= wanted]
    return cuts[-1]


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else -1


# -- siblings ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class ForkNode:
    """A session of a fork family: its id and where it was forked from (None: the root)."""

    id: str
    forked_from_id: str | None
    forked_from_seq: int | None


@dataclass(frozen=True)
class BranchPoint:
    """The sessions that share events 1..`seq` and part there: the one forked from first,
    then its forks at `seq` in the order they were made; `current` is the one on the path
    of the session asked about."""

    seq: int
    sessions: tuple[str, ...]
    current: int


def branch_points(family: Sequence[ForkNode], session_id: str) -> list[BranchPoint]:
    """The branch points a page showing `session_id` meets, oldest first: at each, the
    siblings it can switch to. `family`: the live sessions of its fork family, oldest first."""
    by_id = {n.id: n for n in family}
    lineage: list[tuple[str, int | None]] = []  # (session, the seq its child on the path cut)
    node, cut = by_id.get(session_id), None
    while node is not None:
        lineage.append((node.id, cut))
        if node.forked_from_id is None or node.forked_from_seq is None:
            break
        cut = node.forked_from_seq
        node = by_id.get(node.forked_from_id)
    points: list[BranchPoint] = []
    for base, limit in lineage:
        child_on_path = lineage[lineage.index((base, limit)) - 1][0] if limit is not None else None
        at: dict[int, list[str]] = {}
        for n in family:
            if n.forked_from_id == base and n.forked_from_seq is not None and (
                    limit is None or n.forked_from_seq <= limit):
                at.setdefault(n.forked_from_seq, []).append(n.id)
        for seq, forks in at.items():
            sessions = (base, *forks)
            current = (sessions.index(child_on_path)
                       if seq == limit and child_on_path in sessions else 0)
            points.append(BranchPoint(seq, sessions, current))
    points.sort(key=lambda p: p.seq)
    return points
