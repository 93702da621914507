"""Sub-agents (docs/subagents.md): a run's delegation calls start child sessions and the run
lets go of its lease in the same transaction; a child's first end records its report for the
parent's call and, when it was the last the parent waited on, makes the parent claimable, in
the child's ending transaction; a cancel or a delete of a session goes on to its tree.

Exactly once, by construction: a child is made only under the parent's lease and row lock,
keyed by (parent, call id) (a unique index backs the check), so a repeated or fenced-out
spawn makes no second child; a report is written only by a child's first end (`parent_report
IS NULL`), in the transaction that ends it, so a crash either keeps the end and its report or
neither; and the parent's tool result is written by the parent's own fenced run from that
report, only for a call its history has no result for.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..domain.errors import InvalidInput, LimitReached, NotFound
from ..domain.events import (
    ChildEnded,
    ChildStarted,
    SessionCancelRequested,
    SessionCreated,
    SessionDeleted,
    ToolProgress,
    UserMessage,
)
from ..domain.model import TERMINAL, Delivery, Entry, Lease, NewEvent, Status, new_id
from ..domain.status import Action, Lifecycle, transition
from ..domain.subagents import ChildReport, ChildSpawn, report_of_end
from ._base import Row, Tx, TxState, lifecycle
from ._core import StoreCore
from ._lifecycle import aborts_run, context_columns, held
from ._validation import check_context, check_event_types, check_session_args

__all__ = ["ChildOps"]

PARENT_CANCELLED = "parent_cancelled"
"""The cancel reason of a child whose parent was cancelled."""


class ChildOps(StoreCore):
    async def await_children(
        self, lease: Lease, spawns: Sequence[ChildSpawn], *,
        entries: Sequence[tuple[str, dict[str, Any]]] = (), events: Sequence[NewEvent] = (),
        context: tuple[int, int | None] | None = None, compacted: bool = False,
    ) -> list[str] | None:
        """The run stops to wait on the children of its delegation calls: `entries` and
        `events` (the steps it held), each child of `spawns` its call has not started yet
        (with its task as its first message and a `child_started` on the parent), and the
        lease let go, in one transaction. Returns the ids of the children of `spawns`; None
        when a cancel came first (the session ended cancelled and no child started). When no
        child of the session's calls is left to end, the session is claimable at once."""
        check_event_types(events)
        check_context(context)
        for s in spawns:
            check_session_args(s.agent, s.model, s.task, None, None, None)
        columns = context_columns(context, compacted)

        async def op(tx: Tx, st: TxState) -> list[str] | None:
            row = await self._fenced(tx, lease)
            out = transition(held(row), Action.AWAIT_CHILDREN)
            await self._insert_entries(tx, row, lease, entries)
            owner = row["owner_id"]
            if out.cancelled_now:
                await self._apply(tx, row, out.state, st=st, **columns)
                await self._end_events(tx, row, Status.CANCELLED, None,
                                       row["cancel_reason"] or "user", events, stamp=lease,
                                       dropped=await self._dropped_inputs(tx, row))
                await self._consume_inputs(tx, lease.session_id)
                st.notify(lease.session_id, owner, events=True, owner=True)
                return None
            ids, started = [], []
            for s in spawns:
                found = await tx.fetch(self.q.child_by_call,
                                       {"parent": row["id"], "call_id": s.call_id})
                if found:
                    ids.append(found[0]["id"])
                    continue
                child = await self._insert_child(tx, st, row, s)
                ids.append(child)
                started.append(ChildStarted(call_id=s.call_id, child_id=child,
                                            agent=s.agent).new())
            await self._apply(tx, row, out.state, awaiting_children=1, **columns)
            await self._append(tx, lease.session_id, [*events, *started], fenced=None,
                               stamp=lease)
            if not await tx.fetch(self.q.children_pending, {"parent": row["id"]}):
                # Every child ended already (a resumed run's wait): carry on at once.
                waiting = await self._locked(tx, row["id"], None)
                done = transition(lifecycle(waiting), Action.CHILDREN_SETTLED)
                await self._apply(tx, waiting, done.state, awaiting_children=0)
            st.notify(lease.session_id, owner, work=True, events=True)
            return ids

        return await self._write(op)

    async def _insert_child(self, tx: Tx, st: TxState, parent: Row, s: ChildSpawn) -> str:
        """A child session of `parent` for `s`, queued with its task as its first message
        (the owner's, its agent's model; no title, metadata, budget of its own)."""
        sid = s.child_id or new_id("ses")
        await tx.execute(self.q.insert_session, {
            "id": sid, "owner": parent["owner_id"], "agent": s.agent, "model": s.model,
            "title": None, "title_state": "pending", "metadata": self.d.json({}),
            # The child's first run joins the trace of the parent's run that started it.
            "abandon": None, "last": 1, "tp": parent["run_traceparent"], "budget": None,
            "parent": parent["id"], "root": parent["root_id"] or parent["id"],
            "call_id": s.call_id, "depth": int(parent["depth"]) + 1,
            "detached": int(s.detached), "end_user": parent["end_user"],
            "input_bytes": len(s.task.encode("utf-8", "surrogatepass")),
        })
        message = UserMessage(text=s.task, delivery=Delivery.START.value)
        await self._insert_events_now(tx, [(sid, 1, 0, 0, message.new())])
        await self._owner_event(tx, parent["owner_id"], sid,
                                SessionCreated(status=Status.QUEUED.value, attempt=0,
                                               title=None))
        st.notify(sid, parent["owner_id"], work=True, events=True, owner=True)
        return sid

    async def child_reports(self, session_id: str) -> list[ChildReport]:
        """The children of a session's delegation calls, oldest first, each with its report
        (its first end) once it has one, the answer read from its history."""

        async def op(tx: Tx) -> list[ChildReport]:
            out = []
            for r in await tx.fetch(self.q.children_of_parent, {"parent": session_id}):
                report = self.d.load_json(r["parent_report"]) if r["parent_report"] else None
                if not report:
                    out.append(ChildReport(r["parent_call_id"], r["id"], r["agent"], None,
                                           detached=bool(r["detached"])))
                    continue
                out.append(ChildReport(r["parent_call_id"], r["id"], r["agent"],
                                       report["status"], report.get("attention"),
                                       report.get("error"),
                                       await self._report_text(tx, r["id"], report),
                                       bool(r["detached"])))
            return out

        return await self._read(op)

    async def _report_text(self, tx: Tx, child_id: str, report: Mapping[str, Any]
                           ) -> str | None:
        """The child's last answer at its report's end."""
        found = await tx.fetch(self.q.last_answer,
                               {"sid": child_id, "upto": int(report["entry_seq"])})
        text = self.d.load_json(found[0]["data"]).get("text") if found else None
        return None if text is None else str(text)

    async def start_detached(
        self, lease: Lease, spawn: ChildSpawn, *,
        entries: Sequence[tuple[str, dict[str, Any]]] = (), events: Sequence[NewEvent] = (),
    ) -> tuple[str, list[Entry]]:
        """A detached call's child (`spawn.child_id`) and the steps the run holds (the
        call's result naming the child among them), in one fenced write; the run keeps its
        lease and goes on. Returns the child's id and the entries written."""
        check_event_types(events)
        if not spawn.detached or spawn.child_id is None:
            raise InvalidInput("a detached spawn names its child's id")
        check_session_args(spawn.agent, spawn.model, spawn.task, None, None, None)

        async def op(tx: Tx, st: TxState) -> tuple[str, list[Entry]]:
            row = await self._fenced(tx, lease)
            written = await self._insert_entries(tx, row, lease, entries)
            found = await tx.fetch(self.q.child_by_call,
                                   {"parent": row["id"], "call_id": spawn.call_id})
            started: list[NewEvent] = []
            if found:  # its result was written with it: a resumed run never asks again
                child = found[0]["id"]
            else:
                child = await self._insert_child(tx, st, row, spawn)
                started.append(ChildStarted(call_id=spawn.call_id, child_id=child,
                                            agent=spawn.agent).new())
            await self._append(tx, lease.session_id, [*events, *started], fenced=None,
                               stamp=lease)
            st.notify(lease.session_id, row["owner_id"], events=True)
            return child, written

        return await self._write(op)

    async def relay_progress(self, lease: Lease, message: str) -> bool:
        """Put `message` on the waiting parent's log as progress of the delegation call
        the lease's session answers (runtime/child_progress.py); False, writing nothing,
        when nobody waits on it (a root, a detached child, one that reported, a parent that
        ended or that a run holds). Child row, then parent's: a child's end's order."""

        async def op(tx: Tx, st: TxState) -> bool:
            row = await self._fenced(tx, lease)
            if (row["parent_id"] is None or row["parent_call_id"] is None or row["detached"]
                    or row["parent_report"] is not None):
                return False
            try:
                parent = await self._locked(tx, row["parent_id"], None)
            except NotFound:
                return False
            if (Status(parent["status"]) in TERMINAL or parent["lease_worker"] is not None
                    or not lifecycle(parent).awaiting_children):
                return False
            progress = ToolProgress(call_id=row["parent_call_id"], message=message)
            await self._append(tx, parent["id"], [progress.new()], fenced=None)
            st.notify(parent["id"], parent["owner_id"], events=True)
            return True

        return await self._write(op)

    async def _child_ended(self, tx: Tx, st: TxState | None, row: Row, new: Lifecycle,
                           extra: Mapping[str, Any]) -> None:
        """A child of a delegation call ends (in the transaction of its end): its first end
        is its report, `child_ended` goes on its parent's log while the parent waits (or is
        parked), and the last report it waited on makes the parent claimable again."""
        if row["parent_report"] is not None or Status(row["status"]) in TERMINAL:
            return
        succeeded = new.status is Status.SUCCEEDED
        report = report_of_end(new.status.value, extra.get("attention") if succeeded else None,
                               extra.get("error_code"), extra.get("error_message"),
                               int(extra.get("last_entry_seq", row["last_entry_seq"])))
        await tx.execute(self.q.set_parent_report, {"id": row["id"],
                                                     "report": self.d.json(report)})
        if row["detached"]:  # its parent does not wait: `post_reports` tells it
            if st is not None:
                st.notify(row["parent_id"], row["owner_id"], work=True)
            return
        try:
            parent = await self._locked(tx, row["parent_id"], None)
        except NotFound:  # purged: nobody waits
            return
        if Status(parent["status"]) in TERMINAL or parent["lease_worker"] is not None:
            # Ended, or held by a run (which reads the report when it waits next): its log
            # is left alone, as a run's own writes number its events.
            return
        ended = ChildEnded(call_id=row["parent_call_id"], child_id=row["id"],
                           status=new.status.value)
        await self._append(tx, parent["id"], [ended.new()], fenced=None)
        state = lifecycle(parent)
        work = False
        if state.awaiting_children and not await tx.fetch(self.q.children_pending,
                                                          {"parent": parent["id"]}):
            out = transition(state, Action.CHILDREN_SETTLED)
            await self._apply(tx, parent, out.state, awaiting_children=0)
            work = True
        if st is not None:
            st.notify(parent["id"], parent["owner_id"], work=work, events=True)

    async def _cancel_tree(self, tx: Tx, st: TxState, session_id: str) -> None:
        """Every live session below `session_id` is asked to stop, as `request_cancel` asks
        (a queued or waiting one ends at once; a running one's worker stops it)."""
        ids = [session_id]
        while ids:
            rows = await tx.fetch(self.q.live_children, {"ids": self.d.ids(ids)})
            for row in rows:
                out = transition(lifecycle(row), Action.REQUEST_CANCEL)
                if not out.changed:
                    continue
                await self._apply(tx, row, out.state, st=st, cancel_reason=PARENT_CANCELLED)
                await self._owner_event(tx, row["owner_id"], row["id"],
                                        SessionCancelRequested(reason=PARENT_CANCELLED))
                if out.cancelled_now:
                    await self._end_events(tx, row, Status.CANCELLED, None, PARENT_CANCELLED,
                                           dropped=await self._dropped_inputs(tx, row))
                    await self._consume_inputs(tx, row["id"])
                    await self._cancel_approval(tx, row)
                st.notify(row["id"], row["owner_id"], work=True, events=out.cancelled_now,
                          owner=True, cancel=aborts_run(row, out.state))
            ids = [r["id"] for r in rows]

    async def _delete_tree(self, tx: Tx, st: TxState, session_id: str,
                           purge_in: float | None) -> None:
        """Every session below `session_id` is deleted with it (and purged when it is)."""
        ids = [session_id]
        while ids:
            rows = await tx.fetch(self.q.child_tree, {"ids": self.d.ids(ids)})
            for row in rows:
                if purge_in is not None:
                    await tx.execute(self.q.set_purge_after,
                                     {"grace": purge_in, "id": row["id"]})
                out = transition(lifecycle(row), Action.DELETE)
                extra: dict[str, Any] = (
                    {} if row["status"] in TERMINAL else {"cancel_reason": "deleted"})
                await self._apply(tx, row, out.state, st=st, **extra)
                if out.cancelled_now:
                    await self._end_events(tx, row, Status.CANCELLED, None, "deleted",
                                           dropped=await self._dropped_inputs(tx, row))
                    await self._consume_inputs(tx, row["id"])
                    await self._cancel_approval(tx, row)
                await self._owner_event(tx, row["owner_id"], row["id"], SessionDeleted())
                st.notify(row["id"], row["owner_id"], work=True, events=out.cancelled_now,
                          owner=True, cancel=aborts_run(row, out.state))
            ids = [r["id"] for r in rows]

    async def _check_child_limits(self, tx: Tx, parent: Row, max_depth: int,
                                  max_children: int) -> None:
        """A child the API makes is held to the limits a delegation call is (the parent's
        row is locked: two creates take turns, so the count holds)."""
        depth = int(parent["depth"]) + 1
        if depth > max_depth:
            raise LimitReached(f"a child of session {parent['id']} would be {depth} levels "
                               f"below its root; its agent allows {max_depth}")
        rows = await tx.fetch(self.q.count_children, {"parent": parent["id"]})
        if int(rows[0]["n"]) >= max_children:
            raise LimitReached(f"session {parent['id']} has {max_children} children, as many "
                               "as its agent allows")

    async def _parent_for_create(self, tx: Tx, owner_id: str, parent_id: str) -> Row:
        """The parent a create through the API names: the owner's own, else NotFound."""
        rows = await tx.fetch(self.q.lock_owned_session, {"id": parent_id, "owner": owner_id})
        if not rows or rows[0]["deleted_at"] is not None:
            raise NotFound(f"session {parent_id} not found")
        return rows[0]
