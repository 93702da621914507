"""The ports of time (docs/schedules.md): an owner's schedules and scheduled messages, and the
worker's firing pass; part of the Store ports (`_port`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol

__all__ = ["FireReport", "FiringStore", "Schedule", "ScheduleRun", "ScheduleStore",
           "ScheduledMessage"]


@dataclass(frozen=True)
class ScheduledMessage:
    id: str
    session_id: str
    kind: str
    """`message` (a follow-up sent with `deliver_at` or `delay`) or `wakeup` (the session's
    own `schedule_wakeup`)."""
    text: str
    mode: str
    deliver_at: float
    """Unix seconds."""
    created_at: datetime | None


@dataclass(frozen=True)
class Schedule:
    id: str
    cron: str | None
    every: int | None
    timezone: str
    prompt: str
    agent: str
    model: str
    target_session_id: str | None
    """None: each fire starts a new session."""
    overlap: str
    catch_up: str
    paused: bool
    next_fire_at: int | None
    """Unix seconds of the next fire (None while paused)."""
    pending_fire_at: int | None
    last_session_id: str | None
    created_at: datetime | None


@dataclass(frozen=True)
class ScheduleRun:
    fire_at: int
    outcome: str
    """`started` (a new session), `posted` (to the target session), `queued` (held until the
    previous fire's session ends), `skipped` (overlap `skip`, or a queued fire already held)."""
    session_id: str | None
    caught_up: bool
    fired_at: datetime | None


@dataclass
class FireReport:
    """What one firing pass did, for the worker's metrics."""

    messages: list[float] = field(default_factory=list)
    """The lateness (seconds after `deliver_at`) of each message it delivered."""
    fires: list[tuple[str, float]] = field(default_factory=list)
    """(outcome, lateness) of each fire it made."""
    due: int = 0
    """Messages and schedules it found due."""
    more: bool = False
    """A batch was full: more may be due already."""


class ScheduleStore(Protocol):
    """An owner's scheduled messages and schedules (the API)."""

    async def schedule_message(
        self, owner_id: str, session_id: str, text: str, *, mode: str = "steer",
        deliver_at: float | None = None, delay: float | None = None,
    ) -> ScheduledMessage:
        """Store a follow-up to post at `deliver_at` (Unix seconds) or `delay` seconds from
        now (the database's clock); `InvalidInput` past the horizon, `LimitReached` past the
        owner's pending messages."""
        ...
    async def list_scheduled(self, owner_id: str, session_id: str) -> list[ScheduledMessage]: ...
    async def cancel_scheduled(self, owner_id: str, session_id: str, message_id: str) -> None:
        """`NotFound` when it is unknown or already delivered."""
        ...
    async def create_schedule(
        self, owner_id: str, *, prompt: str, agent: str, model: str, cron: str | None = None,
        every: int | None = None, timezone: str = "UTC", target_session_id: str | None = None,
        overlap: str = "skip", catch_up: str = "one",
    ) -> Schedule: ...
    async def list_schedules(self, owner_id: str, *, limit: int = 100,
                             cursor: str | None = None) -> tuple[list[Schedule], str | None]: ...
    async def get_schedule(self, owner_id: str, schedule_id: str) -> Schedule: ...
    async def set_schedule_paused(self, owner_id: str, schedule_id: str,
                                  paused: bool) -> Schedule:
        """Pause (no fires until resumed) or resume (from the next fire time after now:
        the fires while paused do not happen)."""
        ...
    async def delete_schedule(self, owner_id: str, schedule_id: str) -> None: ...
    async def schedule_runs(self, owner_id: str, schedule_id: str, *, limit: int = 100,
                            before: int | None = None) -> list[ScheduleRun]:
        """Its fires, newest first (`before`: fire times before this one)."""
        ...


class FiringStore(Protocol):
    """The worker's side: due messages and fires, and a run's wake-ups."""

    async def fire_due(self, *, grace: float, limit: int = 100) -> FireReport:
        """One bounded pass, one transaction: deliver due messages, make due fires (each
        once: its run row and its session or message commit together) and start queued
        fires whose previous session ended."""
        ...
    async def schedule_wakeup(
        self, session_id: str, call_id: str, text: str, *, at: float | None = None,
        delay: float | None = None, max_pending: int, horizon: float,
    ) -> ScheduledMessage:
        """A wake-up for the session (a message carrying `text`), once per tool call:
        the same `call_id` again returns the first. `LimitReached` past `max_pending` for
        the session, `InvalidInput` past `horizon` seconds."""
        ...

