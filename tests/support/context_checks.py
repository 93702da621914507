"""What must hold of a session's compactions whatever happened to its workers (issue 30):
each prefix of the history is summarized at most once, and the log says so exactly.

A compaction commits one `summary` history entry and one `context_compacted` event together
(runtime/context.py); a worker killed before that commit leaves neither, and the next one
starts over. So the entries that cut (`summary`, `truncation`) cover ever longer prefixes,
a `trim` keeps the prefix of the entry before it, and the events match the entries one to
one, in order, with the same fence.
"""

from __future__ import annotations

from outlive.domain import Entry, Event
from outlive.store import Store

from .sessions import all_events

__all__ = ["CUTS", "assert_one_summary_per_prefix"]

CUTS = ("summary", "truncation")
"""The methods that put a prefix of the history behind a summary (or a note)."""


async def assert_one_summary_per_prefix(store: Store, session_id: str) -> list[Entry]:
    """Assert the invariants above; returns the session's summary entries, oldest first."""
    entries = [e for e in await store.read_entries(session_id) if e.kind == "summary"]
    cuts = [e.data["through"] for e in entries if e.data["method"] in CUTS]
    assert len(cuts) == len(set(cuts)), f"a prefix was summarized more than once: {cuts}"
    assert cuts == sorted(cuts), f"the summarized prefix shrank: {cuts}"
    through = 0
    for e in entries:
        if e.data["method"] in CUTS:
            assert e.data["through"] > through, (e.seq, e.data["through"], through)
        else:
            assert e.data["method"] == "trim", e.data
            assert e.data["through"] == through, (e.seq, e.data["through"], through)
        through = e.data["through"]
    events: list[Event] = [e for e in await all_events(store, session_id)
                           if e.type == "context_compacted"]
    assert [_of_event(e) for e in events] == [_of_entry(e) for e in entries]
    return entries


def _of_event(e: Event) -> tuple[str, int, int, int]:
    return (e.data["method"], e.data["through_entry"], e.data["covered_entries"], e.fence)


def _of_entry(e: Entry) -> tuple[str, int, int, int]:
    return (e.data["method"], e.data["through"], e.data["covered"], e.fence)
