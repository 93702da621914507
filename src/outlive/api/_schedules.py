"""Time routes (docs/schedules.md): a session's scheduled messages, and the owner's schedules.

Owner-scoped through the Store (a foreign id is the same 404 as an unknown one). Bad input
(a cron that is not one, an unknown time zone, a number past its bound) is a 400 or 422 before
anything is written; a full limit is 409 `LIMIT_REACHED`.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Literal

from fastapi import APIRouter, Query
from pydantic import BaseModel, ConfigDict, Field

from ..domain.model import MAX_TEXT_CHARS
from ..domain.schedules import MAX_EVERY
from ..store import Schedule, ScheduleRun, check_string
from ._auth import CurrentOwner
from ._context import Ctx
from ._errors import error_responses
from ._schemas import DeletedOut, ScheduledMessageOut, scheduled_out
from ._sessions import resolve_agent

__all__ = ["router"]

router = APIRouter(prefix="/v1", tags=["schedules"])


def _iso(t: float | None) -> datetime | None:
    return None if t is None else datetime.fromtimestamp(t, UTC)


class ScheduledList(BaseModel):
    scheduled: list[ScheduledMessageOut]


class CreateSchedule(BaseModel):
    model_config = ConfigDict(extra="forbid")

    cron: str | None = Field(default=None, max_length=200, description="Five fields (minute "
                             "hour day month weekday) or `@daily` etc., in `timezone`.")
    every: int | None = Field(default=None, ge=1, le=MAX_EVERY,
                              description="Seconds between fires (give this or `cron`).")
    timezone: str = Field(default="UTC", max_length=64,
                          description="IANA time zone of the cron expression (DST rules: "
                          "docs/schedules.md).")
    prompt: str = Field(min_length=1, json_schema_extra={"maxLength": MAX_TEXT_CHARS},
                        description="The message each fire sends.")
    agent: str | None = Field(default=None, max_length=200, description="For new sessions.")
    model: str | None = Field(default=None, max_length=200, description="For new sessions.")
    target: str = Field(default="new_session", max_length=200,
                        description="`new_session` (a session per fire) or a session id (the "
                        "prompt is posted to it).")
    overlap: Literal["skip", "queue"] = Field(
        default="skip", description="A fire while the previous fire's run still runs: `skip` "
        "it, or `queue` it until that run ends (one held at most).")
    catch_up: Literal["one", "none"] = Field(
        default="one", description="Fires missed while no worker ran: `one` fire for them "
        "all, or `none`.")


class ScheduleOut(BaseModel):
    id: str
    cron: str | None
    every: int | None
    timezone: str
    prompt: str
    agent: str
    model: str
    target: str
    overlap: str
    catch_up: str
    paused: bool
    next_fire_at: datetime | None = Field(description="null while paused.")
    queued_fire_at: datetime | None = Field(description="A fire held until the previous "
                                            "fire's session ends (overlap `queue`).")
    last_session_id: str | None
    created_at: datetime | None


def schedule_out(s: Schedule) -> ScheduleOut:
    return ScheduleOut(
        id=s.id, cron=s.cron, every=s.every, timezone=s.timezone, prompt=s.prompt,
        agent=s.agent, model=s.model, target=s.target_session_id or "new_session",
        overlap=s.overlap, catch_up=s.catch_up, paused=s.paused,
        next_fire_at=_iso(s.next_fire_at), queued_fire_at=_iso(s.pending_fire_at),
        last_session_id=s.last_session_id, created_at=s.created_at)


class SchedulesPage(BaseModel):
    schedules: list[ScheduleOut]
    next_cursor: str | None


class ScheduleRunOut(BaseModel):
    fire_at: datetime = Field(description="The fire time: with the schedule, its identity.")
    outcome: Literal["started", "posted", "queued", "skipped"]
    session_id: str | None
    caught_up: bool = Field(description="It stood for fires missed while no worker ran.")
    fired_at: datetime | None


def run_out(r: ScheduleRun) -> ScheduleRunOut:
    at = _iso(r.fire_at)
    assert at is not None
    return ScheduleRunOut(fire_at=at, outcome=r.outcome,  # type: ignore[arg-type]
                          session_id=r.session_id, caught_up=r.caught_up, fired_at=r.fired_at)


class ScheduleRunsPage(BaseModel):
    runs: list[ScheduleRunOut]


@router.get(
    "/sessions/{session_id}/scheduled",
    response_model=ScheduledList,
    responses=error_responses(401, 404, 422),
    summary="The session's messages waiting for their time (follow-ups and wake-ups)",
)
async def list_scheduled(session_id: str, owner: CurrentOwner, ctx: Ctx) -> ScheduledList:
    items = await ctx.store.list_scheduled(owner.id, session_id)
    return ScheduledList(scheduled=[scheduled_out(m) for m in items])


@router.delete(
    "/sessions/{session_id}/scheduled/{message_id}",
    response_model=DeletedOut,
    responses=error_responses(401, 404, 422),
    summary="Cancel a scheduled message before its time (404 once delivered)",
)
async def cancel_scheduled(session_id: str, message_id: str, owner: CurrentOwner,
                           ctx: Ctx) -> DeletedOut:
    await ctx.store.cancel_scheduled(owner.id, session_id, message_id)
    return DeletedOut()


@router.post(
    "/schedules",
    status_code=201,
    response_model=ScheduleOut,
    responses=error_responses(400, 401, 404, 409, 413, 422),
    summary="Create a schedule: `cron` or `every`, each fire once",
)
async def create_schedule(body: CreateSchedule, owner: CurrentOwner, ctx: Ctx) -> ScheduleOut:
    for what, value in (("cron", body.cron), ("timezone", body.timezone),
                        ("target", body.target)):
        if value is not None:
            check_string(value, what)
    agent, model = resolve_agent(ctx, body.agent, body.model)
    target = None if body.target == "new_session" else body.target
    created = await ctx.store.create_schedule(
        owner.id, prompt=body.prompt, agent=agent, model=model, cron=body.cron,
        every=body.every, timezone=body.timezone, target_session_id=target,
        overlap=body.overlap, catch_up=body.catch_up)
    return schedule_out(created)


@router.get(
    "/schedules",
    response_model=SchedulesPage,
    responses=error_responses(400, 401, 422),
    summary="The owner's schedules, newest first",
)
async def list_schedules(
    owner: CurrentOwner, ctx: Ctx, limit: int = Query(100, ge=1, le=200),
    cursor: str | None = Query(None, max_length=200),
) -> SchedulesPage:
    items, nxt = await ctx.store.list_schedules(owner.id, limit=limit, cursor=cursor)
    return SchedulesPage(schedules=[schedule_out(s) for s in items], next_cursor=nxt)


@router.get(
    "/schedules/{schedule_id}",
    response_model=ScheduleOut,
    responses=error_responses(401, 404, 422),
    summary="One schedule",
)
async def get_schedule(schedule_id: str, owner: CurrentOwner, ctx: Ctx) -> ScheduleOut:
    return schedule_out(await ctx.store.get_schedule(owner.id, schedule_id))


@router.post(
    "/schedules/{schedule_id}/pause",
    response_model=ScheduleOut,
    responses=error_responses(401, 404, 422),
    summary="Pause: no fires until resumed",
)
async def pause_schedule(schedule_id: str, owner: CurrentOwner, ctx: Ctx) -> ScheduleOut:
    return schedule_out(await ctx.store.set_schedule_paused(owner.id, schedule_id, True))


@router.post(
    "/schedules/{schedule_id}/resume",
    response_model=ScheduleOut,
    responses=error_responses(401, 404, 422),
    summary="Resume from the next fire time after now (the paused ones do not happen)",
)
async def resume_schedule(schedule_id: str, owner: CurrentOwner, ctx: Ctx) -> ScheduleOut:
    return schedule_out(await ctx.store.set_schedule_paused(owner.id, schedule_id, False))


@router.delete(
    "/schedules/{schedule_id}",
    response_model=DeletedOut,
    responses=error_responses(401, 404, 422),
    summary="Delete a schedule and its run history (its sessions stay)",
)
async def delete_schedule(schedule_id: str, owner: CurrentOwner, ctx: Ctx) -> DeletedOut:
    await ctx.store.delete_schedule(owner.id, schedule_id)
    return DeletedOut()


@router.get(
    "/schedules/{schedule_id}/runs",
    response_model=ScheduleRunsPage,
    responses=error_responses(400, 401, 404, 422),
    summary="The schedule's fires, newest first",
)
async def schedule_runs(
    schedule_id: str, owner: CurrentOwner, ctx: Ctx, limit: int = Query(100, ge=1, le=1000),
    before: int | None = Query(None, ge=0, le=2**53,
                               description="Fire times before this one (Unix seconds)."),
) -> ScheduleRunsPage:
    runs = await ctx.store.schedule_runs(owner.id, schedule_id, limit=limit, before=before)
    return ScheduleRunsPage(runs=[run_out(r) for r in runs])
