"""The protocol-neutral steps the run fold (`run_fold.py`) turns a run's slice into, and the
table a protocol projection renders them with.

A step says what happened to the run in the terms every streaming protocol shares (parts,
tool calls, questions, approvals, the end) with every rule already applied, so a renderer
decides nothing but its own shapes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Generic, Literal, TypeVar

from . import events as ev

__all__ = [
    "ApprovalAnswered",
    "ApprovalAsked",
    "ChildBegan",
    "ChildFinished",
    "ClientCallAsked",
    "Closing",
    "Compacted",
    "PartClosed",
    "PartDelta",
    "PartKind",
    "PartOpened",
    "QuestionAsked",
    "Renderers",
    "RunClaimed",
    "RunEnded",
    "RunError",
    "RunIncomplete",
    "StateChanged",
    "Step",
    "ToolBegan",
    "ToolFinished",
    "ToolOutcome",
    "ToolProgressed",
    "TurnBegan",
    "UsageReported",
]

PartKind = Literal["text", "reasoning"]
Closing = Literal["completed", "cut_short", "abandoned"]
ToolOutcome = Literal["ok", "error", "interrupted"]


# ---- the steps ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PartOpened:
    kind: PartKind
    part_id: str


@dataclass(frozen=True, slots=True)
class PartDelta:
    kind: PartKind
    part_id: str
    text: str


@dataclass(frozen=True, slots=True)
class PartClosed:
    """`tail` is what the deltas lacked of the authoritative text (sent before closing);
    `text` the part's final text (empty for an abandoned part)."""

    kind: PartKind
    part_id: str
    how: Closing
    tail: str = ""
    text: str = ""


@dataclass(frozen=True, slots=True)
class TurnBegan:
    turn: int | None
    retry: int | None
    message_id: str | None


@dataclass(frozen=True, slots=True)
class RunClaimed:
    """A worker runs the slice now (`session_start`, or `session_resumed` after a takeover)."""

    resumed: bool


@dataclass(frozen=True, slots=True)
class ToolBegan:
    """`again`: a call that had ended in this run, started again; its steps carry the call id
    made unique (`<call id>_<seq>`). A protocol that keys parts by call id may skip them."""

    call_id: str
    tool: str
    arguments: Any
    again: bool = False
    logged_id: str = ""
    """The call id in the log (`call_id` without the suffix `again` adds)."""


@dataclass(frozen=True, slots=True)
class ToolProgressed:
    call_id: str
    message: Any


@dataclass(frozen=True, slots=True)
class ChildBegan:
    """A delegation call (`call_id`, running) started its child session (docs/subagents.md)."""

    call_id: str
    child_id: str
    agent: str


@dataclass(frozen=True, slots=True)
class ChildFinished:
    """The child of a delegation call (`call_id`, running) ended with `status`; the call's
    result follows as its `ToolFinished`."""

    call_id: str
    child_id: str
    status: str


@dataclass(frozen=True, slots=True)
class ToolFinished:
    call_id: str
    outcome: ToolOutcome
    result: Any = None
    error: Any = None
    again: bool = False


@dataclass(frozen=True, slots=True)
class QuestionAsked:
    """`call_id` is unique among the run's calls."""

    seq: int
    call_id: str
    question: str
    options: list[Any]


@dataclass(frozen=True, slots=True)
class ApprovalAsked:
    approval_id: str
    call_id: str
    tool: str
    args: dict[str, Any]
    expires_at: str | None


@dataclass(frozen=True, slots=True)
class ClientCallAsked:
    """A call of a client tool (docs/client-tools.md): its client runs it; `last` is the last
    call the run waits on (the run stops there until their results come)."""

    call_id: str
    name: str
    args: dict[str, Any]
    last: bool


@dataclass(frozen=True, slots=True)
class ApprovalAnswered:
    approval_id: str
    call_id: str
    tool: str
    status: str
    reason: str | None


@dataclass(frozen=True, slots=True)
class StateChanged:
    """The session's stage or title changed."""


@dataclass(frozen=True, slots=True)
class UsageReported:
    input_tokens: int
    output_tokens: int


@dataclass(frozen=True, slots=True)
class Compacted:
    """The model's view of the history was made smaller before a model call (`seq`: the
    `context_compacted` event's). Protocols pass `data`, the event's payload as on the wire,
    on to clients that show it (a divider in a transcript)."""

    seq: int
    data: dict[str, Any]


@dataclass(frozen=True, slots=True)
class RunIncomplete:
    reason: str


@dataclass(frozen=True, slots=True)
class RunError:
    """An error the run does not retry."""

    code: str
    message: str


@dataclass(frozen=True, slots=True)
class RunEnded:
    """`status` is settled (`settled_status`); `error` the `session_end`'s own, `failure` the
    run's last `RunError`, `incomplete` its last `RunIncomplete` reason."""

    status: str
    reason: str
    error: ev.ErrorBody | str | None
    failure: RunError | None
    incomplete: str | None


Step = (
    PartOpened | PartDelta | PartClosed | TurnBegan | RunClaimed | ToolBegan | ToolProgressed
    | ChildBegan | ChildFinished | ToolFinished | QuestionAsked | ApprovalAsked
    | ApprovalAnswered | ClientCallAsked | StateChanged | UsageReported | Compacted
    | RunIncomplete | RunError | RunEnded
)


T = TypeVar("T")
S = TypeVar("S")


class Renderers(Generic[T]):
    """A protocol's rendering table: the function that renders each step type onto its
    projection `T` (`@table.of(PartOpened)`); a step with none renders nothing."""

    def __init__(self) -> None:
        self._table: dict[type, Callable[[T, Any], None]] = {}

    def of(self, step: type[S]) -> Callable[[Callable[[T, S], None]], Callable[[T, S], None]]:
        def register(render: Callable[[T, S], None]) -> Callable[[T, S], None]:
            self._table[step] = render
            return render

        return register

    def render(self, target: T, steps: Iterable[Step]) -> None:
        for step in steps:
            render = self._table.get(type(step))
            if render is not None:
                render(target, step)
