"""Resume planning: what a new claim must repair in the model history before it carries on.

Assistant entries are written only when their model call ends, so the history can be cut in
exactly two places by a crash: after an assistant message whose tool calls have no results yet
(dangling calls), or anywhere before an answer was committed (nothing to repair: the aborted
frame was never written and the model is simply called again).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

__all__ = ["DanglingCall", "HistoryEntry", "ResumePlan", "plan_resume", "visible"]


class HistoryEntry(Protocol):
    @property
    def kind(self) -> str: ...
    @property
    def data(self) -> dict[str, Any]: ...


@dataclass(frozen=True)
class DanglingCall:
    call_id: str
    name: str
    arguments: Mapping[str, Any]


@dataclass(frozen=True)
class ResumePlan:
    dangling: tuple[DanglingCall, ...]
    """Tool calls the last committed answer asked for that have no result."""
    complete: bool
    """The history ends in a final answer: without new input there is nothing to do."""
    awaiting_user: bool
    """The history ends in a question to the user: wait for the answer, don't call the model."""


def visible(entries: Iterable[HistoryEntry]) -> list[HistoryEntry]:
    """The entries the model sees: aborted (cancelled or interrupted) answers are left out."""
    return [
        e for e in entries
        if not (e.kind == "assistant" and e.data.get("status", "complete") != "complete")
    ]


def plan_resume(entries: Iterable[HistoryEntry]) -> ResumePlan:
    view = visible(entries)
    if not view:
        return ResumePlan((), complete=False, awaiting_user=False)
    last_answer = None
    for i in range(len(view) - 1, -1, -1):
        if view[i].kind == "assistant":
            last_answer = i
            break
    if last_answer is None:
        return ResumePlan((), complete=False, awaiting_user=False)
    answer = view[last_answer]
    calls = answer.data.get("tool_calls") or []
    tail = view[last_answer + 1 :]
    answered = {e.data.get("call_id") for e in tail if e.kind == "tool_result"}
    dangling = tuple(
        DanglingCall(c["call_id"], c["name"], c.get("arguments") or {})
        for c in calls
        if c["call_id"] not in answered
    )
    has_user_after = any(e.kind == "user" for e in tail)
    complete = not calls and not has_user_after
    awaiting = (
        bool(calls)
        and not dangling
        and not has_user_after
        and any(e.kind == "tool_result" and e.data.get("await_user") for e in tail)
    )
    return ResumePlan(dangling, complete=complete, awaiting_user=awaiting)
