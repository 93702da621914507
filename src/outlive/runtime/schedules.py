"""Time in the worker (docs/schedules.md): the firing loop, and the `schedule_wakeup` tool.

The loop passes every `fire_interval` seconds: each pass is one store transaction that
delivers due messages and makes due fires, shared with other workers by `SKIP LOCKED`, so any
number of workers fire each fire time once and a restart loses none. A full batch is followed
by another pass at once.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from .. import metrics
from ..domain.errors import InvalidInput, LimitReached, NotFound
from ..domain.schedules import WAKEUP_PREFIX
from ..store import FireReport, FiringStore
from ..tools import Tool, ToolContext, ToolFailure, tool
from .settings import RuntimeSettings

__all__ = ["WAKEUP_TOOL", "Firing", "wakeup_tool"]

log = logging.getLogger("outlive.schedules")

WAKEUP_TOOL = "schedule_wakeup"


class Firing:
    """One worker's firing loop."""

    def __init__(self, store: FiringStore, settings: RuntimeSettings) -> None:
        self.store = store
        self.settings = settings

    async def run(self) -> None:
        while True:
            try:
                report = await self.store.fire_due(grace=self.settings.schedule_grace,
                                                   limit=self.settings.fire_batch)
            except Exception as exc:
                log.warning("firing pass failed: %s", exc)
                await asyncio.sleep(self.settings.fire_interval)
                continue
            record(report)
            if not report.more:
                await asyncio.sleep(self.settings.fire_interval)


def record(report: FireReport) -> None:
    metrics.SCHEDULE_DUE.set(report.due)
    for late in report.messages:
        metrics.SCHEDULE_FIRES.labels("delivered").inc()
        metrics.SCHEDULE_LATENESS.labels("message").observe(late)
    for outcome, late in report.fires:
        metrics.SCHEDULE_FIRES.labels(outcome).inc()
        metrics.SCHEDULE_LATENESS.labels("fire").observe(late)


class WakeupArgs(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    in_: float | None = Field(default=None, alias="in", gt=0,
                              description="Seconds from now (give this or `at`).")
    at: datetime | None = Field(default=None, description="An RFC 3339 time with its offset.")
    note: str = Field(min_length=1, max_length=2000,
                      description="What to do when woken: it comes back as the message.")


def wakeup_tool(store: FiringStore, settings: RuntimeSettings) -> Tool[Any]:
    """The tool an agent opts into (`Agent.wakeups`): the wake-up arrives as a message
    `WAKEUP_PREFIX + note`; past the session's limits the call fails with the reason."""

    @tool(name=WAKEUP_TOOL, idempotent=True,
          description="Ask to be woken later: in `in` seconds or `at` a time, with a `note` "
          "that comes back to you as a message then.")
    async def schedule_wakeup(args: WakeupArgs, ctx: ToolContext) -> dict[str, Any] | ToolFailure:
        if (args.in_ is None) == (args.at is None):
            return ToolFailure("give exactly one of `in` (seconds) and `at` (a time)")
        at = None
        if args.at is not None:
            if args.at.tzinfo is None:
                return ToolFailure("`at` needs its offset, e.g. 2026-01-01T09:00:00Z")
            at = args.at.timestamp()
        try:
            w = await store.schedule_wakeup(
                ctx.session_id, ctx.call_id, WAKEUP_PREFIX + args.note, at=at, delay=args.in_,
                max_pending=settings.wakeups_per_session, horizon=settings.wakeup_horizon)
        except (InvalidInput, LimitReached, NotFound) as exc:
            return ToolFailure(exc.message)
        when = datetime.fromtimestamp(w.deliver_at, UTC).isoformat(timespec="seconds")
        return {"scheduled": w.id, "deliver_at": w.deliver_at,
                "summary": f"you will be woken at {when} with your note"}

    return schedule_wakeup
