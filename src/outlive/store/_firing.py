"""The worker's firing pass (docs/schedules.md): due messages posted, due fires made, each once.

One pass is one transaction over bounded batches. Its rows are taken `FOR UPDATE SKIP LOCKED`
(PostgreSQL), so workers passing at once share the due work instead of waiting on each other;
a message's delete and its post, a fire's run row (UNIQUE (schedule_id, fire_at)) and its
session or message, and the schedule's next fire time all commit together or not at all: a
worker killed mid-pass leaves them due for the next pass, never half done.
"""

from __future__ import annotations

import json
import math
from typing import Any

from ..domain.errors import InvalidInput, LimitReached, NotFound
from ..domain.events import ScheduleFired
from ..domain.model import TERMINAL, Delivery, NewEvent, Status, new_id
from ..domain.schedules import CatchUp, plan_fires
from ..domain.webhooks import SCHEDULE_EVENT
from ._base import Row, Tx, TxState
from ._core import OwnerEvent
from ._schedule_ports import FireReport, ScheduledMessage
from ._schedules import MAX_SCHEDULED, ScheduleOps, spec_of, to_scheduled
from ._sessions import SessionOps
from ._validation import check_string, check_text

__all__ = ["FiringOps"]

FIRES_PER_SCHEDULE = 10
"""Fires one schedule makes in a pass at most (a backlog continues in the next pass)."""
RUN_COLUMNS = ("schedule_id", "fire_at", "outcome", "session_id", "caught_up")


class _Pass:
    """What one pass writes at its end, in a statement each: the run rows, the schedules'
    next fire times, the owner events (owner rows last, in owner order, as a claim writes
    them: passes running at once never wait on each other's owners)."""

    def __init__(self, now: float) -> None:
        self.now = now
        self.report = FireReport()
        self.owner_events: list[OwnerEvent] = []
        self.first_events: list[tuple[str, int, int, int, NewEvent]] = []
        """The prompts of the sessions the pass starts (seq 1 each)."""
        self.runs: list[dict[str, Any]] = []
        self.advances: list[dict[str, Any]] = []
        self.statuses: dict[str, str] = {}
        """Status of each previous fire's session, read once for the batch (and `queued` for
        the sessions this pass starts)."""
        self.hooked: dict[str, bool] = {}
        """Owner -> has an endpoint for `schedule.fired`."""


class FiringOps(SessionOps, ScheduleOps):
    async def fire_due(self, *, grace: float, limit: int = 100) -> FireReport:
        async def op(tx: Tx, st: TxState) -> FireReport:
            p = _Pass(await self._now(tx))
            due = await tx.fetch(self.q.due_messages, {"now": p.now, "limit": limit})
            for m in due:
                await self._deliver(tx, st, m, p)
            schedules = await tx.fetch(self.q.due_schedules,
                                       {"now": math.floor(p.now), "limit": limit})
            last = [r["last_session_id"] for r in schedules if r["last_session_id"]]
            if last:
                rows = await tx.fetch(self.q.session_statuses, {"ids": self.d.ids(last)})
                p.statuses.update({r["id"]: r["status"] for r in rows})
            for row in schedules:
                await self._fire(tx, st, row, grace, p)
            await self._insert_events_now(tx, p.first_events)
            p.first_events.clear()
            await self._insert_rows(tx, "schedule_runs", RUN_COLUMNS, p.runs)
            if p.advances:
                await tx.execute(self.q.advance_schedules, {"rows": json.dumps(p.advances)})
            pending = await tx.fetch(self.q.pending_schedules, {"no": False, "limit": limit})
            for row in pending:
                await self._start_pending(tx, st, row, p)
            await self._insert_events_now(tx, p.first_events)  # the queued fires' sessions
            await self._owner_events(tx, p.owner_events)
            p.report.due = len(due) + len(schedules) + len(pending)
            p.report.more = limit in (len(due), len(schedules), len(pending))
            return p.report

        return await self._write(op)

    async def _deliver(self, tx: Tx, st: TxState, m: Row, p: _Pass) -> None:
        await tx.execute(self.q.delete_scheduled, {"id": m["id"]})
        rows = await tx.fetch(self.q.lock_session, {"id": m["session_id"]})
        p.report.messages.append(max(0.0, p.now - float(m["deliver_at"])))
        if not rows or rows[0]["deleted_at"] is not None:
            return  # its session is gone: so is the message
        await self._post_locked(tx, st, rows[0], m["text"], Delivery(m["mode"]),
                                owner_events=p.owner_events)

    async def _fire(self, tx: Tx, st: TxState, row: Row, grace: float, p: _Pass) -> None:
        plan = plan_fires(spec_of(row), int(row["next_fire_at"]), p.now, grace=grace,
                          catch_up=CatchUp(row["catch_up"]), limit=FIRES_PER_SCHEDULE)
        state = {"pending": row["pending_fire_at"], "last": row["last_session_id"]}
        for fire_at, caught_up in plan.fires:
            outcome, sid = await self._one_fire(tx, st, row, state, p)
            # No ON CONFLICT: a second write of the same fire fails its whole transaction.
            p.runs.append({"schedule_id": row["id"], "fire_at": fire_at, "outcome": outcome,
                           "session_id": sid, "caught_up": caught_up})
            if outcome == "queued" and row["target_session_id"] is None:
                state["pending"] = fire_at
            await self._announce(tx, st, row, sid, fire_at, outcome, caught_up, p)
        p.advances.append({"id": row["id"], "next": plan.next_at, "pending": state["pending"],
                           "last": state["last"]})

    async def _one_fire(self, tx: Tx, st: TxState, row: Row, state: dict[str, Any],
                        p: _Pass) -> tuple[str, str | None]:
        """What one fire does by `overlap`: (outcome, the session it concerns)."""
        target = row["target_session_id"]
        if target is not None:
            rows = await tx.fetch(self.q.lock_session, {"id": target})
            if not rows or rows[0]["deleted_at"] is not None:
                return "skipped", None
            busy = Status(rows[0]["status"]) not in TERMINAL
            if busy and row["overlap"] == "skip":
                return "skipped", target
            mode = Delivery.QUEUE if busy else Delivery.STEER
            await self._post_locked(tx, st, rows[0], row["prompt"], mode,
                                    owner_events=p.owner_events)
            return "posted", target
        last = state["last"]
        if last is not None and last in p.statuses and Status(p.statuses[last]) not in TERMINAL:
            if row["overlap"] == "queue" and state["pending"] is None:
                return "queued", last
            return "skipped", last
        sid = await self._start(tx, st, row, p)
        state["last"] = sid
        return "started", sid

    async def _start(self, tx: Tx, st: TxState, row: Row, p: _Pass) -> str:
        sid = new_id("ses")
        await self._create_in(tx, st, row["owner_id"], sid, agent=row["agent"],
                              model=row["model"], prompt=row["prompt"],
                              metadata={"schedule_id": row["id"]},
                              owner_events=p.owner_events, first_events=p.first_events)
        p.statuses[sid] = Status.QUEUED.value
        return sid

    async def _start_pending(self, tx: Tx, st: TxState, row: Row, p: _Pass) -> None:
        fire_at = int(row["pending_fire_at"])
        sid = await self._start(tx, st, row, p)
        await tx.execute(self.q.start_pending_run, {"id": row["id"], "fire": fire_at,
                                                    "sid": sid})
        await tx.execute(self.q.advance_schedule, {
            "id": row["id"], "next": row["next_fire_at"], "pending": None, "last": sid})
        await self._announce(tx, st, row, sid, fire_at, "started", False, p)

    async def _announce(self, tx: Tx, st: TxState, row: Row, sid: str | None, fire_at: int,
                        outcome: str, caught_up: bool, p: _Pass) -> None:
        """The owner event and the webhook of a fire, with the session it concerns."""
        p.report.fires.append((outcome, max(0.0, p.now - fire_at)))
        if sid is None:
            return
        owner = row["owner_id"]
        payload = ScheduleFired(schedule_id=row["id"], fire_at=fire_at, outcome=outcome,
                                caught_up=caught_up)
        p.owner_events.append((owner, sid, payload))
        st.notify(sid, owner, owner=True)
        hooked = p.hooked.get(owner)
        if hooked is None:
            hooked = p.hooked[owner] = bool(await tx.fetch(
                self.q.owner_hooked, {"owner": owner, "pattern": f"%,{SCHEDULE_EVENT},%"}))
        if hooked:
            await self._enqueue_webhook(tx, {"id": sid, "owner_id": owner}, SCHEDULE_EVENT,
                                        payload.data())

    async def schedule_wakeup(
        self, session_id: str, call_id: str, text: str, *, at: float | None = None,
        delay: float | None = None, max_pending: int, horizon: float,
    ) -> ScheduledMessage:
        check_text(text)
        check_string(call_id, "call_id")

        async def op(tx: Tx, st: TxState) -> ScheduledMessage:
            seen = await tx.fetch(self.q.scheduled_by_call, {"sid": session_id, "call": call_id})
            if seen:
                return to_scheduled(self.d, seen[0])
            rows = await tx.fetch(self.q.lock_session, {"id": session_id})
            if not rows:
                raise NotFound(f"session {session_id} not found")
            owner = rows[0]["owner_id"]
            when = await self._deliver_time(tx, at, delay, horizon)
            n = int((await tx.fetch(self.q.count_scheduled_session,
                                    {"sid": session_id, "kind": "wakeup"}))[0]["n"])
            if n >= max_pending:
                raise LimitReached(f"this session has {n} wake-ups waiting; the limit is "
                                   f"{max_pending}")
            total = int((await tx.fetch(self.q.count_scheduled_owner, {"owner": owner}))[0]["n"])
            if total >= MAX_SCHEDULED:
                raise LimitReached(f"the owner has {total} scheduled messages waiting")
            out = await tx.fetch(self.q.insert_scheduled_message, {
                "id": new_id("sch"), "sid": session_id, "owner": owner, "kind": "wakeup",
                "text": text, "mode": Delivery.QUEUE.value, "call": call_id, "deliver": when})
            if not out:  # pragma: no cover - the same call raced itself
                raise InvalidInput("the wake-up was scheduled concurrently")
            return to_scheduled(self.d, out[0])

        return await self._write(op)
