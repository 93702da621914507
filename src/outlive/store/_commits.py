"""A run's fenced commits: history entries, their events and the delivery cursor in one
write, alone (`commit`) or many runs' at once (`commit_many`, the worker's group commit);
and the automatic title, alone (`set_auto_title`) or with a commit.

A group commit costs a fixed number of statements whatever its size: one `commit_heads`
UPDATE checks every item's fence and allocates its seqs, then multi-row INSERTs write every
item's entries and events, so the transaction is one round trip plus its inserts (pipelined
on PostgreSQL) rather than a round trip per run.
"""

from __future__ import annotations

import abc
from collections.abc import Sequence
from dataclasses import replace
from typing import Any, NoReturn

from ..domain.errors import InvalidInput, LeaseLost, NotFound, OutliveError, PendingInput
from ..domain.events import SessionActiveStage, SessionTitle, Stage, Title
from ..domain.model import Entry, Event, Lease, NewEvent, Status
from ._base import Row, Tx, TxState, lease_lost, to_session
from ._core import EVENT_COLUMNS, OwnerEvent
from ._port import Commit, CommitOutcome, Settle, SettleOutcome
from ._settles import SettleOps, SettleRow, checked_settle, holds
from ._validation import auto_title, check_context, check_event_types

__all__ = ["CommitOps", "HeadItem"]

HeadItem = tuple[Lease, int, int, int, str | None, int | None, int | None, bool]
"""One item of `commit_heads`: the lease, how many events and entries, delivered through,
the automatic title (cleaned) or None, the context's tokens (None: no context to write) and
window, and whether it clears the compaction request."""


def _checked(c: Commit) -> Commit:
    """A commit with its event types checked, its title cleaned (raises InvalidInput) and
    its stage's event last among its events (so its seq is allocated with theirs)."""
    check_event_types(c.events)
    check_context(c.context)
    if c.stage is None and c.title is None:
        return c
    events = c.events if c.stage is None else [*c.events, Stage(stage=c.stage).new()]
    title = None if c.title is None else auto_title(c.title)
    return replace(c, events=events, title=title)


def _delivered(c: Commit) -> int:
    return -1 if c.delivered_through is None else c.delivered_through


def head_item(c: Commit) -> HeadItem:
    tokens, window = (None, None) if c.context is None else c.context
    return (c.lease, len(c.events), len(c.entries), _delivered(c), c.title, tokens, window,
            c.compacted)


class CommitOps(SettleOps):
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
        stage: str | None = None,
        context: tuple[int, int | None] | None = None,
        compacted: bool = False,
    ) -> tuple[list[Entry], list[Event]]:
        """Model-history entries, their events and the delivery cursor in one fenced write, so
        a crash can never leave a message consumed twice or an answer committed twice. With
        `stage`, the active stage is set in the same write (as `set_stage`), and with `title`
        the automatic title (as `set_auto_title`), their events after the commit's own.
        `context` (input tokens, window) and `compacted` (clear the compaction request) are
        written by the same UPDATE that checks the fence: no statement of their own."""
        c = _checked(Commit(lease, entries, events, delivered_through, title, stage, context,
                            compacted))
        _, ne, nn, d, _, ct, cw, cc = head_item(c)

        async def op(tx: Tx, st: TxState) -> tuple[list[Entry], list[Event]]:
            rows = await tx.fetch(
                self.q.commit_head,
                {"ne": ne, "nn": nn, "d": d, "ct": ct, "cw": cw, "cc": cc,
                 "id": lease.session_id, "worker": lease.worker, "fence": lease.fence},
            )
            if not rows:
                await self._refused(tx, lease, _delivered(c))
            ev_rows: list[dict[str, Any]] = []
            en_rows: list[dict[str, Any]] = []
            out = self._written(st, c, rows[0], ev_rows, en_rows)
            if c.stage is not None:
                await self._stage(tx, st, rows[0], lease, c.stage, None)
            if c.title is not None:
                await self._auto_title(tx, st, rows[0], lease, c.title, ev_rows)
            await self._insert_logs(tx, en_rows, ev_rows)
            await self._ledger(tx, out[0])
            return out

        return await self._write(op)

    async def set_auto_title(self, lease: Lease, title: str) -> bool:
        clean = auto_title(title)
        if clean is None:
            return False

        async def op(tx: Tx, st: TxState) -> bool:
            return await self._auto_title(tx, st, await self._fenced(tx, lease), lease, clean)

        return await self._write(op)

    async def commit_many(
        self, commits: Sequence[Commit | Settle]
    ) -> list[CommitOutcome | SettleOutcome]:
        """Group commit. A commit refused by its fence (or invalid) matched no row in
        `commit_heads` and wrote nothing, so the transaction goes on with the others. The
        settles' rows are locked in one statement after the heads, each settled as `settle`
        would (`_settle_locked`), one refused (fence, `PendingInput`) before it wrote
        anything. Every item's entries and events go in one INSERT each. Owner rows (titles,
        stages, ends) are written last, in owner order (the lock order of every other write),
        each owner's events in one statement: a thousand runs of one owner setting their
        stage cost one owner-row update, not a thousand serialized transactions. The settled
        sessions are read with the COMMIT."""
        checked: list[Commit | Settle | OutliveError] = []
        for c in commits:
            try:
                checked.append(_checked(c) if isinstance(c, Commit) else checked_settle(c))
            except InvalidInput as exc:
                checked.append(exc)
        valid = sorted((i for i, c in enumerate(checked) if not isinstance(c, OutliveError)),
                       key=lambda i: commits[i].lease.session_id)
        sessions = [commits[i].lease.session_id for i in valid]
        if len(set(sessions)) != len(sessions):
            raise InvalidInput("a group commit holds at most one item per session")

        async def op(tx: Tx, st: TxState) -> tuple[dict[int, Any], TxState]:
            outcomes: dict[int, Any] = {
                i: c for i, c in enumerate(checked) if isinstance(c, OutliveError)}
            ev_rows: list[dict[str, Any]] = []
            en_rows: list[dict[str, Any]] = []
            owner_events: list[OwnerEvent] = []
            await self._commit_items(tx, st, checked, valid, outcomes, ev_rows, en_rows,
                                     owner_events)
            settled = await self._settle_items(tx, st, checked, valid, outcomes, ev_rows,
                                               en_rows, owner_events)
            await self._insert_logs(tx, en_rows, ev_rows)
            await self._ledger(tx, [e for i in valid if isinstance(o := outcomes.get(i), tuple)
                                    for e in o[0]] + settled)
            if owner_events:
                await self._owner_events(tx, owner_events)
            return outcomes, st

        outcomes, st = await self._write(op)
        read = st.last_rows[0] if st.last_rows else []  # the settled sessions, if any settled
        settled = {r["id"]: to_session(self.d, r) for r in read}
        for i, item in enumerate(checked):
            if isinstance(item, Settle) and i not in outcomes:
                outcomes[i] = settled[item.lease.session_id]
        return [outcomes[i] for i in range(len(commits))]

    async def _commit_items(
        self, tx: Tx, st: TxState, checked: Sequence[Commit | Settle | OutliveError],
        valid: Sequence[int], outcomes: dict[int, Any], ev_rows: list[dict[str, Any]],
        en_rows: list[dict[str, Any]], owner_events: list[OwnerEvent],
    ) -> None:
        """The group commit's `Commit` items: one `commit_heads` for all, then each one's
        rows (and its stage and title) as `commit` writes them, or its error."""
        mine = [(i, c) for i in valid if isinstance(c := checked[i], Commit)]
        if not mine:
            return
        items: list[HeadItem] = [head_item(c) for _, c in mine]
        heads = {r["id"]: r for r in await self._commit_heads(tx, items)}
        for i, c in mine:
            head = heads.get(c.lease.session_id)
            if head is None:
                try:
                    await self._refused(tx, c.lease, _delivered(c))
                except (LeaseLost, NotFound, InvalidInput) as exc:
                    outcomes[i] = exc
                continue
            # The head set the title unless the person had set one by hand.
            titled = c.title is not None and head["title_state"] != "manual"
            outcomes[i] = self._written(st, c, head, ev_rows, en_rows, after=int(titled))
            if c.stage is not None:
                await self._stage(tx, st, head, c.lease, c.stage, owner_events)
            if titled:
                assert c.title is not None
                self._title_written(st, head, c.lease, c.title, owner_events, ev_rows)

    async def _settle_items(
        self, tx: Tx, st: TxState, checked: Sequence[Commit | Settle | OutliveError],
        valid: Sequence[int], outcomes: dict[int, Any], ev_rows: list[dict[str, Any]],
        en_rows: list[dict[str, Any]], owner_events: list[OwnerEvent],
    ) -> list[Entry]:
        """The group commit's `Settle` items: their rows locked in one statement (in id
        order), then each settled as `settle` settles it, or its error; the sessions settled
        are read with the COMMIT. Returns the entries the settles wrote."""
        mine = [(i, s) for i in valid if isinstance(s := checked[i], Settle)]
        written: list[Entry] = []
        if not mine:
            return written
        ids = [s.lease.session_id for _, s in mine]
        rows = {r["id"]: r for r in await tx.fetch(self.q.lock_sessions,
                                                   {"ids": self.d.ids(ids)})}
        done: list[str] = []
        ends: list[SettleRow] = []
        for i, s in mine:
            row = rows.get(s.lease.session_id)
            if row is None:
                outcomes[i] = NotFound(f"session {s.lease.session_id} not found")
            elif not holds(row, s.lease):
                outcomes[i] = lease_lost(s.lease)
            else:
                try:
                    written += await self._settle_locked(tx, st, row, s, ev_rows, en_rows,
                                                         owner_events, ends)
                except PendingInput as exc:
                    outcomes[i] = exc
                    continue
                done.append(s.lease.session_id)
        if ends:
            await self._settle_rows(tx, ends)
        if done:
            st.read_with_commit(self.q.settled_sessions, {"ids": self.d.ids(done)})
        return written

    @abc.abstractmethod
    async def _commit_heads(self, tx: Tx, items: Sequence[HeadItem]) -> list[Row]:
        """`commit_head` for every item in one statement (the dialect's `commit_heads`; the
        items travel as one parameter, each database's own way): the rows it matched."""

    def _written(
        self, st: TxState, c: Commit, head: Row, ev_rows: list[dict[str, Any]],
        en_rows: list[dict[str, Any]], *, after: int = 0,
    ) -> tuple[list[Entry], list[Event]]:
        """What a commit whose head matched writes, at the seqs the head allocated (the last
        `after` of them for events after the commit's own): its rows go on `ev_rows` and
        `en_rows`, its notice on `st`."""
        lease = c.lease
        rows, entries = self._entry_rows(
            lease, c.entries, int(head["last_entry_seq"]) - len(c.entries) + 1)
        en_rows.extend(rows)
        rows, events = self._event_rows(
            lease.session_id, c.events, int(head["last_seq"]) - after - len(c.events) + 1,
            head["now"], int(head["attempt"]), lease.fence)
        ev_rows.extend(rows)
        if events:
            st.notify(lease.session_id, head["owner_id"], events=True)
        return entries, events

    async def _refused(self, tx: Tx, lease: Lease, delivered: int) -> NoReturn:
        """Why a head matched no row: the session is gone, the lease is, or the delivery
        cursor named a message that does not exist."""
        rows = await tx.fetch(self.q.get_session, {"id": lease.session_id})
        if not rows:
            raise NotFound(f"session {lease.session_id} not found")
        row = rows[0]
        if (row["lease_worker"] == lease.worker and int(row["fence"]) == lease.fence
                and row["status"] == Status.RUNNING and delivered > int(row["last_input_seq"])):
            raise InvalidInput(f"no user message at seq {delivered}")
        await self._raise_lost(tx, lease)

    async def _stage(self, tx: Tx, st: TxState, head: Row, lease: Lease, stage: str,
                     owner_events: list[OwnerEvent] | None) -> None:
        """The session row and the owner's log of a commit's stage (its event is among the
        commit's). With `owner_events`, the owner's event goes there rather than now."""
        await tx.execute(self.q.set_stage, {"stage": stage, "id": lease.session_id})
        event = SessionActiveStage(stage=stage)
        if owner_events is None:
            await self._owner_event(tx, head["owner_id"], lease.session_id, event)
        else:
            owner_events.append((head["owner_id"], lease.session_id, event))
        st.notify(lease.session_id, head["owner_id"], events=True, owner=True)

    async def _auto_title(
        self, tx: Tx, st: TxState, row: Row, lease: Lease, clean: str,
        ev_rows: list[dict[str, Any]] | None = None,
    ) -> bool:
        """A title the person set by hand is never overwritten. `row` is this transaction's
        lock of the session, with nothing appended since: the `title` event's seq is the one
        after its `last_seq`, taken by the same UPDATE that sets the title (no round trip).
        With `ev_rows`, the event's row goes there (inserted later with the others)."""
        if row["title_state"] == "manual":
            return False
        await tx.execute(self.q.set_auto_title, {"t": clean, "id": lease.session_id})
        rows: list[dict[str, Any]] = []
        owned: list[OwnerEvent] = []
        self._title_written(st, {**row, "last_seq": int(row["last_seq"]) + 1}, lease, clean,
                            owned, rows if ev_rows is None else ev_rows)
        await self._insert_rows(tx, "session_events", EVENT_COLUMNS, rows)
        for owner, sid, payload in owned:
            await self._owner_event(tx, owner, sid, payload)
        return True

    def _title_written(
        self, st: TxState, head: Row, lease: Lease, clean: str,
        owner_events: list[OwnerEvent], ev_rows: list[dict[str, Any]],
    ) -> None:
        """A title set on the row `head` returned, whose `last_seq` is its `title` event's
        seq: the event's row on `ev_rows`, the owner's event on `owner_events`."""
        rows, _ = self._event_rows(lease.session_id, [Title(title=clean).new()],
                                   int(head["last_seq"]), head["now"], int(head["attempt"]),
                                   lease.fence)
        ev_rows.extend(rows)
        owner_events.append((head["owner_id"], lease.session_id, SessionTitle(title=clean)))
        st.notify(lease.session_id, head["owner_id"], events=True, owner=True)
