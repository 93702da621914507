"""Sub-agents (docs/subagents.md): a delegation tool call runs another agent in a child
session, and the child's first end becomes the call's result.

Pure values and rules: what a run asks the store to start (`ChildSpawn`), what a child's end
leaves for its parent's call (`ChildReport`), and how that report reads to the model (a
result only for a child that finished its task; an error for every other end, never a false
success).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = [
    "DEFAULT_MAX_CHILDREN",
    "DEFAULT_MAX_DEPTH",
    "DELEGATE_PREFIX",
    "ChildReport",
    "ChildSpawn",
    "delegate_tool",
    "detached_message",
    "report_of_end",
    "report_outcome",
]

DELEGATE_PREFIX = "agent__"
"""The tool the model calls to delegate to agent `x` is `agent__x`."""
DEFAULT_MAX_DEPTH = 3
"""How far below its root a child may be (a root is depth 0)."""
DEFAULT_MAX_CHILDREN = 16
"""How many children one session may start in all."""


def delegate_tool(agent: str) -> str:
    return f"{DELEGATE_PREFIX}{agent}"


@dataclass(frozen=True)
class ChildSpawn:
    """One child a run's delegation call starts: `task` is its first user message."""

    call_id: str
    agent: str
    model: str
    task: str
    detached: bool = False
    """The parent does not wait: the child's report reaches it later as a message."""
    child_id: str | None = None
    """The id the child gets (a detached call's result names it in the same write)."""


@dataclass(frozen=True)
class ChildReport:
    """A child of a delegation call as its parent's run reads it. `status` is None while the
    child has not ended yet; else its first end's status, attention, error and answer."""

    call_id: str
    child_id: str
    agent: str
    status: str | None
    attention: str | None = None
    error: dict[str, Any] | None = None
    text: str | None = None
    detached: bool = False


def report_of_end(status: str, attention: str | None, error_code: str | None,
                  error_message: str | None, entry_seq: int) -> dict[str, Any]:
    """What a child's first end records for its parent's call (`parent_report`): the
    answer is read from the child's history at `entry_seq` when the parent resumes."""
    report: dict[str, Any] = {"status": status, "entry_seq": entry_seq}
    if attention is not None:
        report["attention"] = attention
    if error_code is not None:
        report["error"] = {"code": error_code, "message": error_message or ""}
    return report


def report_outcome(r: ChildReport) -> tuple[bool, Any, dict[str, Any] | None]:
    """The call's tool result as (ok, result, error): a child that succeeded with nothing
    left undone gives its answer; a failure, a cancel, a budget stop or a question nobody
    will answer gives an error that says so, with the child's id for a person to look."""
    value: dict[str, Any] = {"child_id": r.child_id, "agent": r.agent, "status": r.status}
    if r.status == "succeeded" and r.attention is None:
        return True, {"child_id": r.child_id, "agent": r.agent, "answer": r.text or ""}, None
    if r.status == "succeeded" and r.attention == "budget":
        message = f"sub-agent {r.agent} stopped at its budget before it finished"
    elif r.status == "succeeded":
        message = (f"sub-agent {r.agent} stopped to ask a question nobody will answer: "
                   f"{r.text or ''}".rstrip(": "))
    elif r.status == "cancelled":
        message = f"sub-agent {r.agent} was cancelled"
    else:
        err = r.error or {}
        message = f"sub-agent {r.agent} failed: {err.get('message') or err.get('code') or '?'}"
        if err:
            value["error"] = err
    if r.attention is not None:
        value["attention"] = r.attention
    if r.text:
        value["answer"] = r.text
    return False, None, {"message": message, "retryable": False, "value": value}


def detached_message(child_id: str, agent: str, call_id: str, report: dict[str, Any],
                     text: str | None) -> str:
    """The message a detached child's first end sends its parent: its answer, or what
    stopped it (the same reading as `report_outcome`'s)."""
    r = ChildReport(call_id, child_id, agent, str(report.get("status")),
                    report.get("attention"), report.get("error"), text)
    ok, value, error = report_outcome(r)
    head = f"[sub-agent {agent} ({child_id}), detached by call {call_id}]"
    if ok:
        return f"{head} finished: {value['answer']}"
    assert error is not None
    return f"{head} {error['message']}"
