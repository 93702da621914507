"""Runs: claims and leases, then a run's fenced writes besides its commits and title
(`_commits.py`) and its settle (`_settles.py`): the delivery cursor, stage, park; and the
abandon scan that asks unwatched runs to stop."""

from __future__ import annotations

import abc
import asyncio
from collections.abc import Sequence
from typing import Any

from ..domain.errors import InvalidInput
from ..domain.events import (
    SessionActiveStage,
    SessionCancelRequested,
    SessionInterrupted,
    SessionStart,
    Stage,
)
from ..domain.model import (
    Claim,
    ClaimReason,
    ErrorInfo,
    Event,
    Lease,
    Status,
)
from ..domain.status import Action, transition
from ._base import Row, Tx, TxState, lifecycle, to_event, to_session
from ._core import OwnerEvent
from ._lifecycle import held, session_end, status_event
from ._port import Held
from ._quotas import QuotaOps

__all__ = ["RunOps"]

_Taken = tuple[str, ClaimReason, Lease | None]
"""A session a claim took: its id, why, and its lease (none when the claim ended it)."""
_STARTS = (ClaimReason.NEW, ClaimReason.FOLLOW_UP, ClaimReason.COMPACT)
"""Claims whose run begins with `session_start` (the others resume)."""
_BUSY_TRIES = 3
"""Heartbeat passes over the sessions whose rows were locked by another transaction."""


class RunOps(QuotaOps):
    async def claim(
        self, worker: str, *, limit: int, lease_ttl: float, max_attempts: int = 5,
        start: bool = False,
    ) -> list[Claim]:
        if limit < 1:
            return []

        async def op(tx: Tx, st: TxState) -> tuple[list[_Taken], set[str], TxState]:
            rows, taken = await self._claim_candidates(tx, worker, limit, lease_ttl,
                                                       max_attempts, start)
            if not rows:
                return [], set(), st
            claims: list[_Taken] = []
            owner_events: list[OwnerEvent] = []
            starts: list[tuple[Row, ClaimReason, Lease, int]] = []
            started: set[str] = set()
            for row in rows:
                if row["id"] in taken:
                    claims.append((row["id"], *self._taken(st, row, worker, max_attempts,
                                                            owner_events)))
                    started.add(row["id"])
                    continue
                reason, lease, attempt = await self._claim_one(
                    tx, st, row, worker, lease_ttl, max_attempts, owner_events, start)
                claims.append((row["id"], reason, lease))
                if lease is not None and start and reason in _STARTS:
                    starts.append((row, reason, lease, attempt))
                    started.add(row["id"])
            # The first events as soon as the leases are taken (nothing waits for them) ...
            await self._write_starts(tx, starts)
            # ... then owner rows, locked last and in one order: concurrent claims cannot
            # deadlock; an owner's events cost one update of its row however many sessions
            # were taken.
            if owner_events:
                await self._owner_events(tx, sorted(owner_events, key=lambda e: (e[0], e[1])))
            ids = self.d.ids([sid for sid, _, _ in claims])
            # The sessions as taken (and the waiting prompts) come back with the COMMIT.
            st.read_with_commit(self.q.claimed_sessions, {"ids": ids})
            if any(int(r["last_input_seq"]) > int(r["delivered_input_seq"]) for r in rows):
                st.read_with_commit(self.q.claimed_inputs, {"ids": ids})
            return claims, started, st

        claims, started, st = await self._write(op)
        if not claims:
            return []
        fresh = {r["id"]: r for r in st.last_rows[0]}
        waiting: dict[str, list[Event]] = {}
        for r in st.last_rows[1] if len(st.last_rows) > 1 else ():
            waiting.setdefault(r["session_id"], []).append(to_event(self.d, r))
        return [Claim(to_session(self.d, fresh[sid]), reason, lease, started=sid in started,
                      inputs=None if lease is None else tuple(waiting.get(sid, ())))
                for sid, reason, lease in claims]

    @abc.abstractmethod
    async def _claim_candidates(
        self, tx: Tx, worker: str, limit: int, lease_ttl: float, max_attempts: int,
        start: bool,
    ) -> tuple[list[Row], set[str]]:
        """The claimable sessions, locked, fairly between owners (takeovers first, then each
        owner's oldest in turn), as they were; and the ids of those the statement already
        took itself. Each adapter claims in its own dialect (its queries are its own)."""

    def _taken(
        self, st: TxState, row: Row, worker: str, max_attempts: int,
        owner_events: list[OwnerEvent],
    ) -> tuple[ClaimReason, Lease]:
        """A session the candidates' statement took as the status machine's claim of a
        queued session would (lease, fence + 1, attempt + 1, `session_start` at the next
        seq): checked against the machine here, then its owner event and notice."""
        out = transition(lifecycle(row), Action.CLAIM, max_attempts=max_attempts)
        if not out.run or out.claim_reason not in _STARTS:
            raise AssertionError(f"session {row['id']} was taken but the claim would "
                                 f"{out.claim_reason} it")
        sid, owner = row["id"], row["owner_id"]
        owner_events.append((owner, sid,
                             status_event(Status.RUNNING, out.state.attempt)))
        st.notify(sid, owner, owner=True, events=True)
        return out.claim_reason, Lease(sid, worker, out.state.fence)

    async def _write_starts(
        self, tx: Tx, starts: Sequence[tuple[Row, ClaimReason, Lease, int]]
    ) -> None:
        """The `session_start` of each new run or follow-up a claim took, at the seq after
        its locked row's last (`_claim_one` counted it), stamped by the database clock as
        the INSERT runs: after the lease is taken, in the flush that carries the COMMIT, so
        no round trip waits for the time first."""
        await self._insert_events_now(tx, [
            (row["id"], int(row["last_seq"]) + 1, attempt, lease.fence,
             SessionStart(reason=reason.value, attempt=attempt).new())
            for row, reason, lease, attempt in starts])

    async def _claim_one(
        self, tx: Tx, st: TxState, row: Row, worker: str, lease_ttl: float, max_attempts: int,
        owner_events: list[OwnerEvent], start: bool,
    ) -> tuple[ClaimReason, Lease | None, int]:
        """Run the session (a lease), or end it (cancel asked, too many attempts; no lease).
        Owner events are queued in `owner_events` for the caller to write last. With `start`,
        a new run's or a follow-up's seq for its `session_start` is counted here (the caller
        writes the event; a resumed run writes `session_resumed` after reading its
        history)."""
        before = lifecycle(row)
        out = transition(before, Action.CLAIM, max_attempts=max_attempts)
        assert out.claim_reason is not None
        sid, owner = row["id"], row["owner_id"]
        if out.run:
            starting = start and out.claim_reason in _STARTS
            seq: dict[str, Any] = {}
            if starting:  # the row is locked: its next seq is known
                seq["last_seq"] = int(row["last_seq"]) + 1
            await self._apply(tx, row, out.state, lease_ttl=lease_ttl, lease_worker=worker,
                              **seq)
            if before.status is not Status.RUNNING or before.attempt != out.state.attempt:
                owner_events.append((owner, sid,
                                     status_event(Status.RUNNING, out.state.attempt)))
            st.notify(sid, owner, owner=True, events=starting)
            return out.claim_reason, Lease(sid, worker, out.state.fence), out.state.attempt
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
        await self._apply(tx, row, out.state, st=st, **extra)
        status = out.state.status
        reason = None if error is not None else (row["cancel_reason"] or "user")
        dropped = await self._dropped_inputs(tx, row) if status is Status.CANCELLED else []
        await self._append(tx, sid, [session_end(status, error, reason, dropped=dropped)],
                           fenced=None)
        owner_events.append((owner, sid,
                             status_event(status, int(row["attempt"]), error=error)))
        if (status is Status.CANCELLED
                and int(row["last_input_seq"]) > int(row["delivered_input_seq"])):
            if await self._revive_or_drop(tx, row, status, owner_event=False):
                owner_events.append((owner, sid,
                                     status_event(Status.QUEUED, 0)))
        st.notify(sid, owner, events=True, owner=True)
        return out.claim_reason, None, out.state.attempt

    async def heartbeat(
        self, worker: str, leases: Sequence[Lease], *, lease_ttl: float
    ) -> list[Held]:
        """Extend this worker's leases. A session whose row another transaction holds just
        now is beaten again a few milliseconds later (at most `_BUSY_TRIES` times in all);
        still busy, it is reported held as the database last committed it: its lease runs
        on until the next heartbeat, and every write is fenced anyway."""
        todo = [lease for lease in leases if lease.worker == worker]
        held: dict[str, Held] = {}
        for attempt in range(_BUSY_TRIES):
            if not todo:
                break
            if attempt:
                await asyncio.sleep(0.005 * attempt)

            async def op(tx: Tx, st: TxState, todo: list[Lease] = todo) -> list[Row]:
                return await self._heartbeat(tx, worker, todo, lease_ttl)

            busy: set[str] = set()
            for r in await self._write(op):
                held[r["id"]] = Held(r["id"], bool(r["cancel"]))
                if r["busy"]:
                    busy.add(r["id"])
            todo = [lease for lease in todo if lease.session_id in busy]
        return list(held.values())

    @abc.abstractmethod
    async def _heartbeat(
        self, tx: Tx, worker: str, leases: Sequence[Lease], ttl: float
    ) -> list[Row]:
        """Extend every lease still matching (worker, fence) with the dialect's `heartbeat`
        query (the leases travel as one parameter, each database's own way); return id,
        cancel flag and `busy` (held, but its row locked by another transaction: not
        extended this time)."""

    async def cancel_abandoned(self) -> list[str]:
        async def op(tx: Tx, st: TxState) -> list[str]:
            rows = await tx.fetch(self.q.abandoned_sessions)
            for r in sorted(rows, key=lambda r: (r["owner_id"], r["id"])):
                await tx.execute(self.q.cancel_abandoned, {"id": r["id"]})
                await self._owner_event(tx, r["owner_id"], r["id"],
                                        SessionCancelRequested(reason="abandoned"))
                st.notify(r["id"], r["owner_id"], work=True, owner=True, cancel=True)
            return [r["id"] for r in rows]

        return await self._write(op)

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
            await self._append(tx, lease.session_id, [Stage(stage=stage).new()],
                               fenced=None, stamp=lease)
            await self._owner_event(tx, row["owner_id"], lease.session_id,
                                    SessionActiveStage(stage=stage))
            st.notify(lease.session_id, row["owner_id"], events=True, owner=True)

        await self._write(op)

    async def park(self, lease: Lease, *, reason: str = "shutdown") -> None:
        async def op(tx: Tx, st: TxState) -> None:
            row = await self._fenced(tx, lease)
            out = transition(held(row), Action.PARK)
            await self._apply(tx, row, out.state)
            await self._append(
                tx, lease.session_id,
                [SessionInterrupted(reason=reason, attempt=int(row["attempt"])).new()],
                fenced=None, stamp=lease,
            )
            st.notify(lease.session_id, row["owner_id"], work=True, events=True)

        await self._write(op)
