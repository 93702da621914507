"""What a run knows of its session's input: the user messages read and not yet delivered,
and when reading the session again is worth a round trip."""

from __future__ import annotations

import enum
import time
from collections.abc import Sequence

from ..domain.events import UserMessage
from ..domain.model import Delivery, Event, Session
from ..store import RunnerStore

__all__ = ["Inbox", "delivery", "to_deliver"]


class _Read(enum.Enum):
    CLAIMED = "claimed"
    """Nothing read yet, and the claim's copy of the session is still the latest."""
    STALE = "stale"
    """A notice (or a repair, or a refused settle) may have brought input or a cancel."""
    READ = "read"
    """Read since the last notice."""


COMPLETE_BACKSTOP = 30.0
"""Seconds between a run's reads of its inbox with no notice, where notices are complete."""


class Inbox:
    """The undelivered user messages of one run's session. Read again after a notice, or
    when the last read is older than the backstop interval: a run between quick steps with no
    notice has nothing new, and one whose notices cannot reach it (a worker process of its own
    on SQLite, whose notices stay in-process) still sees new input at its next turn. Where
    every notice reaches the run (`notices_complete`: PostgreSQL's LISTEN, whose reconnection
    pokes every run), a notice is the main reason to read again: a run of many turns does not
    read its session once a second for nothing, only every `COMPLETE_BACKSTOP`, for the hint
    a process lost by dying between its COMMIT and its notifier's send."""

    def __init__(self, store: RunnerStore, claimed: Session, backstop_interval: float | None,
                 claimed_inputs: Sequence[Event] | None = None, *,
                 notices_complete: bool = False) -> None:
        """`claimed_inputs`: the messages the claim read with the session, if it did."""
        self.store = store
        self.claimed = claimed
        self._claimed_inputs = None if claimed_inputs is None else list(claimed_inputs)
        self.backstop = max(backstop_interval or 1.0, COMPLETE_BACKSTOP if notices_complete
                            else 0.0)
        """How old the last read may grow before it is read again without a notice."""
        self._state = _Read.CLAIMED
        self._read_at = time.monotonic()
        self._waiting: list[Event] = []
        """User messages read and not yet delivered to the model (queued ones wait)."""

    def stale(self) -> None:
        """Something may have changed the session since it was last read."""
        self._state = _Read.STALE

    def claim_outdated(self) -> None:
        """Time passed since the claim (repairs): read the session rather than trust it."""
        if self._state is _Read.CLAIMED:
            self._state = _Read.STALE

    def due(self) -> bool:
        """Whether to read the session again before trusting `waiting()`."""
        if self._state is not _Read.READ:
            return True
        return time.monotonic() - self._read_at >= self.backstop

    def waiting(self) -> list[Event]:
        return list(self._waiting)

    async def session(self) -> Session:
        """The latest session row: the claim's copy while nothing can have changed it."""
        claimed = self._state is _Read.CLAIMED
        self._state = _Read.READ
        self._read_at = time.monotonic()
        if claimed:
            return self.claimed
        return await self.store.load_session(self.claimed.id)

    async def refill(self, fresh: Session) -> list[Event]:
        """Read the undelivered messages, if `fresh` (from `session()`) says there are any."""
        self._waiting = []
        claimed, self._claimed_inputs = self._claimed_inputs, None
        if fresh is self.claimed and claimed is not None:
            self._waiting = claimed  # read by the claim, in the same transaction as `fresh`
        elif fresh.last_input_seq > fresh.delivered_input_seq:
            self._waiting = await self.store.undelivered_inputs(self.claimed.id)
        return list(self._waiting)

    def delivered(self, through: int) -> None:
        """Messages up to `through` were written as delivered: they wait no more."""
        self._waiting = [e for e in self._waiting if e.seq > through]


def delivery(message: Event) -> str | None:
    """How a waiting user message joins the run (`Delivery`), None for any other event."""
    payload = message.payload
    return payload.delivery if isinstance(payload, UserMessage) else None


def to_deliver(inputs: Sequence[Event], *, final: bool) -> list[Event]:
    """The waiting messages the next turn delivers: all of them after the final answer;
    before it, all up to the last one that is not `queue` (a queued message waits for the
    final answer, unless a later steer or interrupt takes it along)."""
    if final:
        return list(inputs)
    cut = 0
    for i, ev in enumerate(inputs):
        if delivery(ev) != Delivery.QUEUE:
            cut = i + 1
    return list(inputs[:cut])
