"""Runs: claims and leases, then a run's fenced writes (its commits, the delivery cursor,
stage and title, park, settle), and the abandon scan that asks unwatched runs to stop."""

from __future__ import annotations

import abc
from collections.abc import Sequence
from dataclasses import replace
from typing import Any, NoReturn

from ..domain.errors import InvalidInput, LeaseLost, NotFound, OutliveError, PendingInput
from ..domain.model import (
    Claim,
    ClaimReason,
    Entry,
    ErrorInfo,
    Event,
    Lease,
    NewEvent,
    Session,
    Status,
)
from ..domain.status import Action, transition
from ._base import Row, Tx, TxState, lifecycle, to_event, to_session
from ._core import StoreCore, held, session_end, status_data
from ._port import Commit, CommitOutcome, Held
from ._validation import auto_title, check_attention, check_event_types, settle_status

__all__ = ["RunOps"]

_OwnerEvent = tuple[str, str, str, dict[str, Any]]
_SETTLE_ACTION = {
    Status.SUCCEEDED: Action.SETTLE_SUCCEEDED,
    Status.FAILED: Action.SETTLE_FAILED,
    Status.CANCELLED: Action.SETTLE_CANCELLED,
}


def _checked(c: Commit) -> Commit:
    """A commit with its event types checked and its title cleaned (raises InvalidInput)."""
    check_event_types(c.events)
    return c if c.title is None else replace(c, title=auto_title(c.title))


class RunOps(StoreCore):
    async def claim(
        self, worker: str, *, limit: int, lease_ttl: float, max_attempts: int = 5
    ) -> list[Claim]:
        if limit < 1:
            return []

        async def op(tx: Tx, st: TxState) -> list[Claim]:
            rows = await tx.fetch(self.q.claim_candidates, {"limit": limit})
            claims: list[tuple[str, ClaimReason, Lease | None]] = []
            owner_events: list[_OwnerEvent] = []
            for row in rows:
                reason, lease = await self._claim_one(tx, st, row, worker, lease_ttl,
                                                      max_attempts, owner_events)
                claims.append((row["id"], reason, lease))
            # Owner rows are locked last and in one order, so concurrent claims cannot deadlock.
            for owner, sid, type_, data in sorted(owner_events, key=lambda e: (e[0], e[1])):
                await self._owner_event(tx, owner, sid, type_, data)
            result = []
            for sid, reason, lease in claims:
                fresh = await tx.fetch(self.q.get_session, {"id": sid})
                result.append(Claim(to_session(self.d, fresh[0]), reason, lease))
            return result

        return await self._write(op)

    async def _claim_one(
        self, tx: Tx, st: TxState, row: Row, worker: str, lease_ttl: float, max_attempts: int,
        owner_events: list[_OwnerEvent],
    ) -> tuple[ClaimReason, Lease | None]:
        """Run the session (a lease), or end it (cancel asked, too many attempts; no lease).
        Owner events are queued in `owner_events` for the caller to write last."""
        before = lifecycle(row)
        out = transition(before, Action.CLAIM, max_attempts=max_attempts)
        assert out.claim_reason is not None
        sid, owner = row["id"], row["owner_id"]
        if out.run:
            await self._apply(tx, row, out.state, lease_worker=worker)
            await tx.execute(self.q.set_lease_expiry, {"ttl": lease_ttl, "id": sid})
            if before.status is not Status.RUNNING or before.attempt != out.state.attempt:
                owner_events.append((owner, sid, "session_status",
                                     status_data(Status.RUNNING, out.state.attempt)))
            st.notify(sid, owner, owner=True)
            return out.claim_reason, Lease(sid, worker, out.state.fence)
        error = None
        if out.error_code == "max_attempts":
            error = ErrorInfo(
                "max_attempts",
                f"the session stopped after {max_attempts} attempts without a "
                "user message; send a new message to retry",
            )
        extra: dict[str, Any] = {}
        if error is not None:
            extra = {"error_code": error.code, "error_message": error.message}
        await self._apply(tx, row, out.state, **extra)
        status = out.state.status
        reason = None if error is not None else (row["cancel_reason"] or "user")
        dropped = await self._dropped_inputs(tx, row) if status is Status.CANCELLED else []
        await self._append(tx, sid, [session_end(status, error, reason, dropped=dropped)],
                           fenced=None)
        owner_events.append((owner, sid, "session_status",
                             status_data(status, int(row["attempt"]), error=error)))
        if (status is Status.CANCELLED
                and int(row["last_input_seq"]) > int(row["delivered_input_seq"])):
            if await self._revive_or_drop(tx, row, status, owner_event=False):
                owner_events.append((owner, sid, "session_status",
                                     status_data(Status.QUEUED, 0)))
        st.notify(sid, owner, events=True, owner=True)
        return out.claim_reason, None

    async def heartbeat(
        self, worker: str, leases: Sequence[Lease], *, lease_ttl: float
    ) -> list[Held]:
        mine = [lease for lease in leases if lease.worker == worker]
        if not mine:
            return []

        async def op(tx: Tx, st: TxState) -> list[Held]:
            rows = await self._heartbeat(tx, worker, mine, lease_ttl)
            return [Held(r["id"], bool(r["cancel"])) for r in rows]

        return await self._write(op)

    @abc.abstractmethod
    async def _heartbeat(
        self, tx: Tx, worker: str, leases: Sequence[Lease], ttl: float
    ) -> list[Row]:
        """Extend every lease still matching (worker, fence) with the dialect's `heartbeat`
        query (the leases travel as one parameter, each database's own way); return id and
        cancel flag."""

    async def cancel_abandoned(self) -> list[str]:
        async def op(tx: Tx, st: TxState) -> list[str]:
            rows = await tx.fetch(self.q.abandoned_sessions)
            for r in sorted(rows, key=lambda r: (r["owner_id"], r["id"])):
                await tx.execute(self.q.cancel_abandoned, {"id": r["id"]})
                await self._owner_event(tx, r["owner_id"], r["id"], "session_cancel_requested",
                                        {"reason": "abandoned"})
                st.notify(r["id"], r["owner_id"], work=True, owner=True, cancel=True)
            return [r["id"] for r in rows]

        return await self._write(op)

    async def append_entries(
        self, lease: Lease, entries: Sequence[tuple[str, dict[str, Any]]]
    ) -> list[Entry]:
        entries_out, _ = await self.commit(lease, entries=entries)
        return entries_out

    async def commit(
        self,
        lease: Lease,
        *,
        entries: Sequence[tuple[str, dict[str, Any]]] = (),
        events: Sequence[NewEvent] = (),
        delivered_through: int | None = None,
        title: str | None = None,
    ) -> tuple[list[Entry], list[Event]]:
        """Model-history entries, their events and the delivery cursor in one fenced write, so
        a crash can never leave a message consumed twice or an answer committed twice. With
        `title`, the automatic title is set in the same write (as `set_auto_title`), its
        event after the commit's own."""
        c = _checked(Commit(lease, entries, events, delivered_through, title))

        async def op(tx: Tx, st: TxState) -> tuple[list[Entry], list[Event]]:
            head, out = await self._commit_one(tx, st, c)
            if c.title is not None:
                await self._auto_title(tx, st, head, lease, c.title)
            return out

        return await self._write(op)

    async def commit_many(self, commits: Sequence[Commit]) -> list[CommitOutcome]:
        """Group commit. Items are written in session order and their titles (owner rows)
        last in owner order, the same lock order as every other write, so two group commits
        and the API's writes cannot deadlock. A refused item wrote nothing (its fenced UPDATE
        matched no row), so the transaction goes on with the others."""
        checked: list[Commit | OutliveError] = []
        for c in commits:
            try:
                checked.append(_checked(c))
            except InvalidInput as exc:
                checked.append(exc)
        order = sorted(range(len(commits)), key=lambda i: commits[i].lease.session_id)

        async def op(tx: Tx, st: TxState) -> list[CommitOutcome]:
            outcomes: dict[int, CommitOutcome] = {}
            titles: list[tuple[str, str, Row, Commit]] = []
            for i in order:
                c = checked[i]
                if isinstance(c, OutliveError):
                    outcomes[i] = c
                    continue
                try:
                    head, outcomes[i] = await self._commit_one(tx, st, c)
                except (LeaseLost, NotFound, InvalidInput) as exc:
                    outcomes[i] = exc
                    continue
                if c.title is not None:
                    titles.append((head["owner_id"], c.lease.session_id, head, c))
            for _, _, head, c in sorted(titles, key=lambda t: (t[0], t[1])):
                assert c.title is not None
                await self._auto_title(tx, st, head, c.lease, c.title)
            return [outcomes[i] for i in range(len(commits))]

        return await self._write(op)

    async def _commit_one(
        self, tx: Tx, st: TxState, c: Commit
    ) -> tuple[Row, tuple[list[Entry], list[Event]]]:
        """The write of one commit (its title aside). Raises before writing anything when the
        fence refuses it: the fenced UPDATE matched no row and changed nothing."""
        lease = c.lease
        delivered = -1 if c.delivered_through is None else c.delivered_through
        rows = await tx.fetch(
            self.q.commit_head,
            {"ne": len(c.events), "nn": len(c.entries), "d": delivered,
             "id": lease.session_id, "worker": lease.worker, "fence": lease.fence},
        )
        if not rows:
            await self._refused(tx, lease, delivered)
        head = rows[0]
        out: list[Entry] = []
        if c.entries:
            first_entry = int(head["last_entry_seq"]) - len(c.entries) + 1
            out = await self._insert_entry_rows(tx, lease, c.entries, first_entry)
        written: list[Event] = []
        if c.events:
            written = await self._insert_events(
                tx, lease.session_id, c.events, int(head["last_seq"]) - len(c.events) + 1,
                head["now"], int(head["attempt"]), lease.fence, head["owner_id"], st,
            )
        return head, (out, written)

    async def _refused(self, tx: Tx, lease: Lease, delivered: int) -> NoReturn:
        """Why `commit_head` matched no row: the session is gone, the lease is, or the
        delivery cursor named a message that does not exist."""
        rows = await tx.fetch(self.q.get_session, {"id": lease.session_id})
        if not rows:
            raise NotFound(f"session {lease.session_id} not found")
        row = rows[0]
        if (row["lease_worker"] == lease.worker and int(row["fence"]) == lease.fence
                and row["status"] == Status.RUNNING and delivered > int(row["last_input_seq"])):
            raise InvalidInput(f"no user message at seq {delivered}")
        await self._raise_lost(tx, lease)

    async def undelivered_inputs(self, session_id: str) -> list[Event]:
        async def op(tx: Tx) -> list[Event]:
            rows = await tx.fetch(self.q.undelivered_inputs, {"sid": session_id})
            return [to_event(self.d, r) for r in rows]

        return await self._read(op)

    async def mark_delivered(self, lease: Lease, seq: int) -> None:
        async def op(tx: Tx, st: TxState) -> None:
            row = await self._fenced(tx, lease)
            if seq > int(row["last_input_seq"]):
                raise InvalidInput(f"no user message at seq {seq} to mark delivered")
            if seq > int(row["delivered_input_seq"]):
                await tx.execute(self.q.set_delivered_input_seq,
                                 {"seq": seq, "id": lease.session_id})

        await self._write(op)

    async def set_stage(self, lease: Lease, stage: str) -> None:
        async def op(tx: Tx, st: TxState) -> None:
            row = await self._fenced(tx, lease)
            await tx.execute(self.q.set_stage, {"stage": stage, "id": lease.session_id})
            await self._append(tx, lease.session_id, [NewEvent("stage", {"stage": stage})],
                               fenced=None, stamp=lease)
            await self._owner_event(tx, row["owner_id"], lease.session_id,
                                    "session_active_stage", {"stage": stage})
            st.notify(lease.session_id, row["owner_id"], events=True, owner=True)

        await self._write(op)

    async def set_auto_title(self, lease: Lease, title: str) -> bool:
        clean = auto_title(title)

        async def op(tx: Tx, st: TxState) -> bool:
            return await self._auto_title(tx, st, await self._fenced(tx, lease), lease, clean)

        return await self._write(op)

    async def _auto_title(self, tx: Tx, st: TxState, row: Row, lease: Lease, clean: str
                          ) -> bool:
        """A title the person set by hand is never overwritten."""
        if row["title_state"] == "manual":
            return False
        await tx.execute(self.q.set_auto_title, {"t": clean, "id": lease.session_id})
        await self._append(tx, lease.session_id, [NewEvent("title", {"title": clean})],
                           fenced=None, stamp=lease)
        await self._owner_event(tx, row["owner_id"], lease.session_id, "session_title",
                                {"title": clean})
        st.notify(lease.session_id, row["owner_id"], events=True, owner=True)
        return True

    async def park(self, lease: Lease, *, reason: str = "shutdown") -> None:
        async def op(tx: Tx, st: TxState) -> None:
            row = await self._fenced(tx, lease)
            out = transition(held(row), Action.PARK)
            await self._apply(tx, row, out.state)
            await self._append(
                tx, lease.session_id,
                [NewEvent("session_interrupted",
                          {"reason": reason, "attempt": int(row["attempt"])})],
                fenced=None, stamp=lease,
            )
            st.notify(lease.session_id, row["owner_id"], work=True, events=True)

        await self._write(op)

    async def settle(
        self,
        lease: Lease,
        status: Status,
        *,
        error: ErrorInfo | None = None,
        events: Sequence[NewEvent] = (),
        entries: Sequence[tuple[str, dict[str, Any]]] = (),
        attention: str | None = None,
    ) -> Session:
        """End the run; `entries` and `events` (before `session_end`) commit with it, so a
        cancel costs one transaction from abort to settled. `attention` ("question") marks
        a run that ended waiting on a person; it holds only on a `succeeded` end."""
        status = settle_status(status)
        check_attention(attention)
        if attention == "approval":
            raise InvalidInput("a run waits on an approval through await_approval, not settle")

        async def op(tx: Tx, st: TxState) -> Session:
            row = await self._fenced(tx, lease)
            final = status
            if final is Status.SUCCEEDED and row["cancel_requested_at"] is not None:
                # A cancel accepted while the run was finishing is honoured, not overtaken.
                final = Status.CANCELLED
            pending = int(row["last_input_seq"]) > int(row["delivered_input_seq"])
            if final is Status.SUCCEEDED and pending:
                raise PendingInput("a user message arrived; deliver it before settling")
            out = transition(held(row), _SETTLE_ACTION[final])
            await self._insert_entries(tx, row, lease, entries)
            reason = row["cancel_reason"] if final is Status.CANCELLED else None
            waits = attention if final is Status.SUCCEEDED else None
            dropped = []
            if pending and final is Status.CANCELLED:
                dropped = await self._dropped_inputs(tx, row)
            await self._apply(
                tx, row, out.state,
                error_code=error.code if error else None,
                error_message=error.message if error else None,
                attention=waits,
            )
            await self._end_events(tx, row, final, error, reason, events, stamp=lease,
                                   attention=waits, dropped=dropped)
            if pending:
                await self._revive_or_drop(tx, row, final)
            st.notify(lease.session_id, row["owner_id"], work=pending, events=True, owner=True)
            return to_session(self.d, await self._locked(tx, lease.session_id, None))

        return await self._write(op)

    async def _insert_entries(
        self, tx: Tx, row: Row, lease: Lease, entries: Sequence[tuple[str, dict[str, Any]]]
    ) -> list[Entry]:
        if not entries:
            return []
        first = int(row["last_entry_seq"]) + 1
        await tx.execute(self.q.set_last_entry_seq,
                         {"last": first + len(entries) - 1, "id": lease.session_id})
        return await self._insert_entry_rows(tx, lease, entries, first)
