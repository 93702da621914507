"""Time as owners see it (docs/schedules.md): follow-ups stored now and delivered later, and
schedules. Storing writes no session: a session with only future messages stays idle (no lease,
no worker); the worker's firing pass (`_firing.py`) posts them when they are due."""

from __future__ import annotations

import math
from typing import Any

from ..domain.errors import InvalidInput, LimitReached, NotFound
from ..domain.model import Delivery, new_id
from ..domain.schedules import CatchUp, Overlap, ScheduleSpec, next_fire, parse_spec
from ._base import Row, Tx, TxState
from ._core import StoreCore
from ._schedule_ports import Schedule, ScheduledMessage, ScheduleRun
from ._validation import check_session_args, check_string, check_text, parse_mode

__all__ = ["MAX_HORIZON", "MAX_SCHEDULED", "MAX_SCHEDULES", "ScheduleOps"]

MAX_SCHEDULES = 100
"""Schedules an owner may have (`LimitReached` past it)."""
MAX_SCHEDULED = 1000
"""Scheduled messages an owner may have waiting, wake-ups included."""
MAX_HORIZON = 366 * 86400.0
"""How far ahead a message may be scheduled, in seconds."""


def to_scheduled(d: Any, row: Row) -> ScheduledMessage:
    return ScheduledMessage(id=row["id"], session_id=row["session_id"], kind=row["kind"],
                            text=row["text"], mode=row["mode"],
                            deliver_at=float(row["deliver_at"]), created_at=d.ts(row["created_at"]))


def to_schedule(d: Any, row: Row) -> Schedule:
    def opt(v: Any) -> int | None:
        return None if v is None else int(v)

    return Schedule(
        id=row["id"], cron=row["cron"], every=opt(row["every"]), timezone=row["timezone"],
        prompt=row["prompt"], agent=row["agent"], model=row["model"],
        target_session_id=row["target_session_id"], overlap=row["overlap"],
        catch_up=row["catch_up"], paused=bool(row["paused"]),
        next_fire_at=opt(row["next_fire_at"]), pending_fire_at=opt(row["pending_fire_at"]),
        last_session_id=row["last_session_id"], created_at=d.ts(row["created_at"]))


def spec_of(row: Row) -> ScheduleSpec:
    """A stored schedule's spec, as `parse_spec` checked it when it was created."""
    every = row["every"]
    return ScheduleSpec(row["cron"], None if every is None else int(every), row["timezone"],
                        int(row["anchor"]))


def _finite(value: float | None, what: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) \
            or not math.isfinite(value) or abs(value) > 1e11:
        raise InvalidInput(f"{what} must be a finite number of seconds")
    return float(value)


def _id(value: str, what: str) -> None:
    if not isinstance(value, str) or not value or len(value) > 200:
        raise NotFound(f"{what} {value} not found")
    try:
        check_string(value, what)
    except InvalidInput:
        raise NotFound(f"{what} {value} not found") from None


class ScheduleOps(StoreCore):
    async def _now(self, tx: Tx) -> float:
        return float((await tx.fetch(self.q.db_epoch))[0]["now"])

    async def _deliver_time(self, tx: Tx, at: float | None, delay: float | None,
                            horizon: float) -> float:
        at, delay = _finite(at, "deliver_at"), _finite(delay, "delay")
        if (at is None) == (delay is None):
            raise InvalidInput("give exactly one of deliver_at and delay")
        now = await self._now(tx)
        if delay is not None and delay <= 0:
            raise InvalidInput("delay must be more than 0 seconds")
        when = now + delay if delay is not None else float(at or 0.0)
        if when <= now:
            raise InvalidInput("deliver_at is in the past; send without it to deliver now")
        if when - now > horizon:
            raise InvalidInput(f"a message may be scheduled at most {horizon:.0f} seconds ahead")
        return when

    async def schedule_message(
        self, owner_id: str, session_id: str, text: str, *, mode: str = "steer",
        deliver_at: float | None = None, delay: float | None = None,
    ) -> ScheduledMessage:
        check_text(text)
        wanted = parse_mode(mode)
        if wanted is Delivery.REJECT:
            raise InvalidInput("a scheduled message cannot use mode reject")
        _id(session_id, "session")

        async def op(tx: Tx, st: TxState) -> ScheduledMessage:
            await self._locked(tx, session_id, owner_id)
            when = await self._deliver_time(tx, deliver_at, delay, MAX_HORIZON)
            n = int((await tx.fetch(self.q.count_scheduled_owner, {"owner": owner_id}))[0]["n"])
            if n >= MAX_SCHEDULED:
                raise LimitReached(f"the owner has {n} scheduled messages waiting; the limit "
                                   f"is {MAX_SCHEDULED}")
            rows = await tx.fetch(self.q.insert_scheduled_message, {
                "id": new_id("sch"), "sid": session_id, "owner": owner_id, "kind": "message",
                "text": text, "mode": wanted.value, "call": None, "deliver": when})
            return to_scheduled(self.d, rows[0])

        return await self._write(op)

    async def list_scheduled(self, owner_id: str, session_id: str) -> list[ScheduledMessage]:
        _id(session_id, "session")

        async def op(tx: Tx) -> list[ScheduledMessage]:
            if not await tx.fetch(self.q.get_owned_session, {"id": session_id,
                                                             "owner": owner_id}):
                raise NotFound(f"session {session_id} not found")
            rows = await tx.fetch(self.q.list_scheduled, {"sid": session_id})
            return [to_scheduled(self.d, r) for r in rows]

        return await self._read(op)

    async def cancel_scheduled(self, owner_id: str, session_id: str, message_id: str) -> None:
        _id(session_id, "session")
        _id(message_id, "scheduled message")

        async def op(tx: Tx, st: TxState) -> None:
            rows = await tx.fetch(self.q.cancel_scheduled,
                                  {"id": message_id, "sid": session_id, "owner": owner_id})
            if not rows:
                raise NotFound(f"scheduled message {message_id} not found")

        await self._write(op)

    async def create_schedule(
        self, owner_id: str, *, prompt: str, agent: str, model: str, cron: str | None = None,
        every: int | None = None, timezone: str = "UTC", target_session_id: str | None = None,
        overlap: str = "skip", catch_up: str = "one",
    ) -> Schedule:
        check_session_args(agent, model, prompt, None, None, None)
        check_text(prompt)
        try:
            lap, catch = Overlap(overlap), CatchUp(catch_up)
        except ValueError:
            raise InvalidInput("overlap is skip or queue; catch_up is one or none") from None
        if cron is not None and not isinstance(cron, str):
            raise InvalidInput("cron must be a string")
        if target_session_id is not None:
            _id(target_session_id, "session")

        async def op(tx: Tx, st: TxState) -> Schedule:
            if target_session_id is not None:
                row = await self._locked(tx, target_session_id, owner_id)
                if row["deleted_at"] is not None:
                    raise NotFound(f"session {target_session_id} not found")
            n = int((await tx.fetch(self.q.count_schedules, {"owner": owner_id}))[0]["n"])
            if n >= MAX_SCHEDULES:
                raise LimitReached(f"the owner has {n} schedules; the limit is {MAX_SCHEDULES}")
            now = math.floor(await self._now(tx))
            spec = parse_spec(cron, every, timezone, now + (every or 0))
            rows = await tx.fetch(self.q.insert_schedule, {
                "id": new_id("sched"), "owner": owner_id, "cron": spec.cron,
                "every": spec.every, "anchor": spec.anchor, "tz": timezone, "prompt": prompt,
                "agent": agent, "model": model, "target": target_session_id,
                "overlap": lap.value, "catch_up": catch.value, "paused": False,
                "next": next_fire(spec, now)})
            return to_schedule(self.d, rows[0])

        return await self._write(op)

    async def list_schedules(self, owner_id: str, *, limit: int = 100,
                             cursor: str | None = None) -> tuple[list[Schedule], str | None]:
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= 200:
            raise InvalidInput("limit must be 1 to 200")
        if cursor is not None:
            check_string(cursor, "cursor")

        async def op(tx: Tx) -> tuple[list[Schedule], str | None]:
            rows = await tx.fetch(self.q.list_schedules,
                                  {"owner": owner_id, "cursor": cursor, "limit": limit + 1})
            items = [to_schedule(self.d, r) for r in rows[:limit]]
            return items, (items[-1].id if len(rows) > limit and items else None)

        return await self._read(op)

    async def get_schedule(self, owner_id: str, schedule_id: str) -> Schedule:
        _id(schedule_id, "schedule")

        async def op(tx: Tx) -> Schedule:
            rows = await tx.fetch(self.q.get_schedule, {"id": schedule_id, "owner": owner_id})
            if not rows:
                raise NotFound(f"schedule {schedule_id} not found")
            return to_schedule(self.d, rows[0])

        return await self._read(op)

    async def set_schedule_paused(self, owner_id: str, schedule_id: str,
                                  paused: bool) -> Schedule:
        _id(schedule_id, "schedule")

        async def op(tx: Tx, st: TxState) -> Schedule:
            rows = await tx.fetch(self.q.lock_schedule, {"id": schedule_id, "owner": owner_id})
            if not rows:
                raise NotFound(f"schedule {schedule_id} not found")
            row = rows[0]
            if bool(row["paused"]) == paused:
                return to_schedule(self.d, row)
            nxt = None if paused else next_fire(spec_of(row), math.floor(await self._now(tx)))
            out = await tx.fetch(self.q.set_schedule_paused,
                                 {"id": schedule_id, "paused": paused, "next": nxt})
            return to_schedule(self.d, out[0])

        return await self._write(op)

    async def delete_schedule(self, owner_id: str, schedule_id: str) -> None:
        _id(schedule_id, "schedule")

        async def op(tx: Tx, st: TxState) -> None:
            if not await tx.fetch(self.q.lock_schedule, {"id": schedule_id, "owner": owner_id}):
                raise NotFound(f"schedule {schedule_id} not found")
            await tx.execute(self.q.delete_schedule_runs, {"id": schedule_id})
            await tx.fetch(self.q.delete_schedule, {"id": schedule_id, "owner": owner_id})

        await self._write(op)

    async def schedule_runs(self, owner_id: str, schedule_id: str, *, limit: int = 100,
                            before: int | None = None) -> list[ScheduleRun]:
        _id(schedule_id, "schedule")
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= 1000:
            raise InvalidInput("limit must be 1 to 1000")
        if before is not None and (isinstance(before, bool) or not isinstance(before, int)
                                   or not 0 <= before <= 2**62):
            raise InvalidInput("before must be a fire time in Unix seconds")

        async def op(tx: Tx) -> list[ScheduleRun]:
            if not await tx.fetch(self.q.get_schedule, {"id": schedule_id, "owner": owner_id}):
                raise NotFound(f"schedule {schedule_id} not found")
            rows = await tx.fetch(self.q.schedule_runs,
                                  {"id": schedule_id, "before": before, "limit": limit})
            return [ScheduleRun(int(r["fire_at"]), r["outcome"], r["session_id"],
                                bool(r["caught_up"]), self.d.ts(r["fired_at"])) for r in rows]

        return await self._read(op)
