"""Every Store operation, written once over the `Tx` seam and a dialect's SQL fragments.

Each public method is one transaction. Lifecycle changes go through the pure status machine
(`domain.status.transition`) on a row read under lock (`FOR UPDATE` on PostgreSQL, the
`BEGIN IMMEDIATE` write lock on SQLite), so the database can only ever hold states the
machine allows. Worker writes name (worker, fence); a stale one changes nothing and raises
`LeaseLost`.
"""

from __future__ import annotations

import abc
import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any, TypeVar

from ..domain.errors import (
    InvalidInput,
    LeaseLost,
    NotFound,
    PendingInput,
    SessionBusy,
    TooLarge,
)
from ..domain.model import (
    EVENT_TYPES,
    MAX_TEXT_CHARS,
    MAX_TITLE_CHARS,
    TERMINAL,
    Claim,
    Delivery,
    Entry,
    ErrorInfo,
    Event,
    Lease,
    NewEvent,
    OwnerEvent,
    Page,
    PostResult,
    Session,
    Status,
    new_id,
)
from ..domain.status import Action, LeaseState, Lifecycle, transition
from ._base import (
    Dialect,
    Row,
    Tx,
    TxState,
    lifecycle,
    to_entry,
    to_event,
    to_owner_event,
    to_session,
)
from ._keys import KeyOps
from ._port import Held, Subscription

__all__ = ["SqlStore"]

T = TypeVar("T")
_CURSOR = re.compile(r"^ses_[0-9A-Z]{26}$")
_SETTLE_ACTION = {
    Status.SUCCEEDED: Action.SETTLE_SUCCEEDED,
    Status.FAILED: Action.SETTLE_FAILED,
    Status.CANCELLED: Action.SETTLE_CANCELLED,
}


def _held(row: Row) -> Lifecycle:
    """The lifecycle as a fenced write sees it: (worker, fence) matched, so the lease holds."""
    return replace(lifecycle(row), lease=LeaseState.HELD)


_INSERT_CHUNK = 100
_EVENT_COLUMNS = ("session_id", "seq", "ts", "attempt", "fence", "type", "data")
_ENTRY_COLUMNS = ("session_id", "seq", "kind", "data", "fence")


def _aborts_run(row: Row, after: Lifecycle) -> bool:
    """Whether a write asked a running session's worker to stop (the notice says so)."""
    return (row["status"] == Status.RUNNING and row["cancel_requested_at"] is None
            and after.cancel_requested and after.status is Status.RUNNING)


def _scrub(value: Any) -> Any:
    """NUL characters become U+FFFD, the same on both databases (PostgreSQL's JSON cannot hold
    them, and model output is untrusted). Returns `value` itself when there is none."""
    if isinstance(value, str):
        return value.replace("\x00", "\ufffd") if "\x00" in value else value
    if isinstance(value, dict):
        out = {k: _scrub(v) for k, v in value.items()}
        return value if all(out[k] is value[k] for k in value) else out
    if isinstance(value, list):
        items = [_scrub(v) for v in value]
        return value if all(a is b for a, b in zip(items, value, strict=True)) else items
    return value


def _check_text(text: str) -> None:
    if not isinstance(text, str) or not text.strip():
        raise InvalidInput("text must be a non-empty string")
    if "\x00" in text:
        raise InvalidInput("text must not contain NUL characters")
    if len(text) > MAX_TEXT_CHARS:
        raise TooLarge(f"text is {len(text)} characters; the limit is {MAX_TEXT_CHARS}")


def _check_title(title: str) -> str:
    if not isinstance(title, str) or not title.strip():
        raise InvalidInput("title must be a non-empty string")
    if "\x00" in title:
        raise InvalidInput("title must not contain NUL characters")
    if len(title) > MAX_TITLE_CHARS:
        raise InvalidInput(f"title is {len(title)} characters; the limit is {MAX_TITLE_CHARS}")
    return title.strip()


class SqlStore(KeyOps, abc.ABC):
    """The shared implementation; adapters supply transactions, notices and the dialect."""

    d: Dialect

    @property
    def dialect(self) -> str:
        return self.d.name

    # -- adapter seam ---------------------------------------------------------------------

    @abc.abstractmethod
    async def _write(self, fn: Callable[[Tx, TxState], Awaitable[T]]) -> T:
        """Run `fn` in one write transaction; send the notices it queued after commit."""

    @abc.abstractmethod
    async def _read(self, fn: Callable[[Tx], Awaitable[T]]) -> T:
        """Run `fn` on a consistent read-only view."""

    @abc.abstractmethod
    def subscribe(self) -> Subscription: ...

    # -- helpers used inside a transaction -----------------------------------------------

    def _select_session(self, where: str, lock: bool) -> str:
        tail = self.d.for_update if lock else ""
        return (
            f"SELECT s.*, (s.lease_expires_at < {self.d.now}) AS lease_expired "
            f"FROM sessions s WHERE {where}{tail}"
        )

    async def _locked(self, tx: Tx, session_id: str, owner_id: str | None) -> Row:
        if owner_id is None:
            rows = await tx.fetch(self._select_session("s.id = :id", True), {"id": session_id})
        else:
            rows = await tx.fetch(
                self._select_session(
                    "s.id = :id AND s.owner_id = :owner AND s.deleted_at IS NULL", True
                ),
                {"id": session_id, "owner": owner_id},
            )
        if not rows:
            raise NotFound(f"session {session_id} not found")
        return rows[0]

    async def _fenced(self, tx: Tx, lease: Lease) -> Row:
        """The session's row, locked, if `lease` still holds it. A lease that lapsed with
        nobody claiming the session since still holds it: the fence is what decides."""
        row = await self._locked(tx, lease.session_id, None)
        if (
            row["lease_worker"] != lease.worker
            or int(row["fence"]) != lease.fence
            or row["status"] != Status.RUNNING
        ):
            raise LeaseLost(
                f"session {lease.session_id} is no longer held by {lease.worker} "
                f"at fence {lease.fence}"
            )
        return row

    async def _append(
        self, tx: Tx, session_id: str, events: Sequence[NewEvent], *, fenced: Lease | None,
        st: TxState | None = None, stamp: Lease | None = None,
    ) -> list[Event]:
        """Allocate gapless seqs through `sessions.last_seq` and insert the events; with `st`,
        queue the session's `events` notice too. Events carry the fence of the lease that
        wrote them (`fenced` or `stamp`), else the session's current one (API writes)."""
        if not events:
            return []
        for ev in events:
            if ev.type not in EVENT_TYPES:
                raise InvalidInput(f"unknown event type {ev.type!r}")
        n = len(events)
        if fenced is None:
            rows = await tx.fetch(
                f"UPDATE sessions SET last_seq = last_seq + :n, updated_at = {self.d.now} "
                "WHERE id = :id RETURNING last_seq, attempt, fence, owner_id, "
                f"{self.d.now} AS now",
                {"n": n, "id": session_id},
            )
            if not rows:
                raise NotFound(f"session {session_id} not found")
        else:
            rows = await tx.fetch(
                f"UPDATE sessions SET last_seq = last_seq + :n, updated_at = {self.d.now} "
                "WHERE id = :id AND lease_worker = :worker AND fence = :fence "
                "AND status = 'running' RETURNING last_seq, attempt, fence, owner_id, "
                f"{self.d.now} AS now",
                {"n": n, "id": session_id, "worker": fenced.worker, "fence": fenced.fence},
            )
            if not rows:
                await self._raise_lost(tx, fenced)
        head = rows[0]
        last, attempt, fence, now = (
            int(head["last_seq"]), head["attempt"], head["fence"], head["now"]
        )
        if stamp is not None:
            fence = stamp.fence
        first = last - n + 1
        return await self._insert_events(tx, session_id, events, first, now, int(attempt),
                                          int(fence), head["owner_id"], st)

    async def _insert_events(
        self, tx: Tx, session_id: str, events: Sequence[NewEvent], first: int, now: Any,
        attempt: int, fence: int, owner_id: str, st: TxState | None,
    ) -> list[Event]:
        """Insert events at seqs first.. (already allocated in `sessions.last_seq`)."""
        await self._insert_rows(
            tx, "session_events", _EVENT_COLUMNS,
            [
                {"session_id": session_id, "seq": first + i, "ts": now, "attempt": attempt,
                 "fence": fence, "type": ev.type, "data": self.d.json(_scrub(ev.data))}
                for i, ev in enumerate(events)
            ],
        )
        ts = self.d.ts(now)
        assert ts is not None
        if st is not None:
            st.notify(session_id, owner_id, events=True)
        return [
            Event(session_id, first + i, ts, attempt, fence, ev.type,
                  dict(_scrub(ev.data)))
            for i, ev in enumerate(events)
        ]

    async def _insert_rows(
        self, tx: Tx, table: str, columns: Sequence[str], rows: Sequence[Mapping[str, Any]]
    ) -> None:
        """One multi-row INSERT per chunk: a statement (and a round trip) per batch, not per
        row. Chunks stay far below SQLite's bound-parameter limit."""
        for start in range(0, len(rows), _INSERT_CHUNK):
            chunk = rows[start : start + _INSERT_CHUNK]
            params: dict[str, Any] = {}
            values = []
            for i, r in enumerate(chunk):
                values.append("(" + ", ".join(f":{c}_{i}" for c in columns) + ")")
                params.update({f"{c}_{i}": r[c] for c in columns})
            await tx.execute(
                f"INSERT INTO {table} ({', '.join(columns)}) VALUES {', '.join(values)}",
                params,
            )

    async def _raise_lost(self, tx: Tx, lease: Lease) -> None:
        rows = await tx.fetch("SELECT id FROM sessions WHERE id = :id", {"id": lease.session_id})
        if not rows:
            raise NotFound(f"session {lease.session_id} not found")
        raise LeaseLost(
            f"session {lease.session_id} is no longer held by {lease.worker} at fence "
            f"{lease.fence}"
        )

    async def _owner_event(
        self, tx: Tx, owner_id: str, session_id: str, type_: str, data: dict[str, Any]
    ) -> None:
        rows = await tx.fetch(
            "UPDATE owners SET last_event_id = last_event_id + 1 WHERE id = :id "
            "RETURNING last_event_id",
            {"id": owner_id},
        )
        await tx.execute(
            "INSERT INTO owner_events (owner_id, id, session_id, ts, type, data) "
            f"VALUES (:owner, :id, :sid, {self.d.now}, :type, :data)",
            {
                "owner": owner_id,
                "id": rows[0]["last_event_id"],
                "sid": session_id,
                "type": type_,
                "data": self.d.json(data),
            },
        )

    async def _apply(self, tx: Tx, row: Row, new: Lifecycle, **extra: Any) -> None:
        """Write a lifecycle from the status machine back to its row."""
        sets = [
            "status = :status",
            "attempt = :attempt",
            "fence = :fence",
            f"updated_at = {self.d.now}",
        ]
        params: dict[str, Any] = {
            "id": row["id"],
            "status": new.status.value,
            "attempt": new.attempt,
            "fence": new.fence,
        }
        if new.lease.value == "none":
            sets.append("lease_worker = NULL, lease_expires_at = NULL")
        if not new.cancel_requested:
            sets.append("cancel_requested_at = NULL")
            if "cancel_reason" not in extra:
                sets.append("cancel_reason = NULL")
        elif row["cancel_requested_at"] is None:
            sets.append(f"cancel_requested_at = {self.d.now}")
        if new.deleted and row["deleted_at"] is None:
            sets.append(f"deleted_at = {self.d.now}")
        for key, value in extra.items():
            sets.append(f"{key} = :{key}")
            params[key] = value
        await tx.execute(f"UPDATE sessions SET {', '.join(sets)} WHERE id = :id", params)

    # -- sessions --------------------------------------------------------------------------

    async def create_session(
        self,
        owner_id: str,
        *,
        agent: str,
        model: str,
        prompt: str | None = None,
        title: str | None = None,
        metadata: dict[str, Any] | None = None,
        abandon_after: float | None = None,
    ) -> Session:
        if prompt is not None:
            _check_text(prompt)
        clean_title = _check_title(title) if title is not None else None
        if abandon_after is not None and abandon_after <= 0:
            raise InvalidInput("abandon_after must be a positive number of seconds")
        if not agent or not model:
            raise InvalidInput("agent and model are required")
        transition(None, Action.CREATE)
        sid = new_id("ses")

        async def op(tx: Tx, st: TxState) -> Session:
            if not await tx.fetch("SELECT id FROM owners WHERE id = :id", {"id": owner_id}):
                raise NotFound(f"owner {owner_id} not found")
            await tx.execute(
                "INSERT INTO sessions (id, owner_id, agent, model, title, title_state, status, "
                "metadata, abandon_after, created_at, updated_at) VALUES (:id, :owner, :agent, "
                f":model, :title, :title_state, 'queued', :metadata, :abandon, {self.d.now}, "
                f"{self.d.now})",
                {
                    "id": sid,
                    "owner": owner_id,
                    "agent": agent,
                    "model": model,
                    "title": clean_title,
                    "title_state": "manual" if clean_title else "pending",
                    "metadata": self.d.json(metadata or {}),
                    "abandon": abandon_after,
                },
            )
            if prompt is not None:
                ev = await self._append(
                    tx,
                    sid,
                    [NewEvent("user_message", {"text": prompt, "delivery": Delivery.START})],
                    fenced=None,
                )
                await tx.execute(
                    "UPDATE sessions SET last_input_seq = :seq WHERE id = :id",
                    {"seq": ev[0].seq, "id": sid},
                )
            await self._owner_event(
                tx,
                owner_id,
                sid,
                "session_created",
                {"status": "queued", "attempt": 0, "title": clean_title},
            )
            st.notify(sid, owner_id, work=True, events=prompt is not None, owner=True)
            row = await self._locked(tx, sid, None)
            return to_session(self.d, row)

        return await self._write(op)

    async def get_session(self, owner_id: str, session_id: str) -> Session:
        async def op(tx: Tx) -> Session:
            rows = await tx.fetch(
                self._select_session(
                    "s.id = :id AND s.owner_id = :owner AND s.deleted_at IS NULL", False
                ),
                {"id": session_id, "owner": owner_id},
            )
            if not rows:
                raise NotFound(f"session {session_id} not found")
            return to_session(self.d, rows[0])

        return await self._read(op)

    async def load_session(self, session_id: str) -> Session:
        async def op(tx: Tx) -> Session:
            rows = await tx.fetch(self._select_session("s.id = :id", False), {"id": session_id})
            if not rows:
                raise NotFound(f"session {session_id} not found")
            return to_session(self.d, rows[0])

        return await self._read(op)

    async def list_sessions(
        self,
        owner_id: str,
        *,
        status: Status | str | None = None,
        limit: int = 50,
        cursor: str | None = None,
    ) -> Page:
        if status is not None:
            try:
                status = Status(status)
            except ValueError:
                raise InvalidInput(
                    f"unknown status {status!r}; use one of {', '.join(s.value for s in Status)}"
                ) from None
        if not isinstance(limit, int) or not 1 <= limit <= 500:
            raise InvalidInput("limit must be between 1 and 500")
        if cursor is not None and not _CURSOR.match(cursor):
            raise InvalidInput("cursor is not one this server handed out")

        async def op(tx: Tx) -> Page:
            rows = await tx.fetch(
                self._select_session(
                    "s.owner_id = :owner AND s.deleted_at IS NULL "
                    "AND (CAST(:status AS TEXT) IS NULL OR s.status = :status) "
                    "AND (CAST(:cursor AS TEXT) IS NULL OR s.id < :cursor) "
                    "ORDER BY s.id DESC LIMIT :limit",
                    False,
                ),
                {
                    "owner": owner_id,
                    "status": status.value if isinstance(status, Status) else None,
                    "cursor": cursor,
                    "limit": limit + 1,
                },
            )
            items = [to_session(self.d, r) for r in rows[:limit]]
            more = len(rows) > limit
            return Page(items, items[-1].id if more and items else None)

        return await self._read(op)

    async def set_title(self, owner_id: str, session_id: str, title: str) -> Session:
        clean = _check_title(title)

        async def op(tx: Tx, st: TxState) -> Session:
            row = await self._locked(tx, session_id, owner_id)
            await tx.execute(
                f"UPDATE sessions SET title = :t, title_state = 'manual', updated_at = "
                f"{self.d.now} WHERE id = :id",
                {"t": clean, "id": session_id},
            )
            await self._append(tx, session_id, [NewEvent("title", {"title": clean})], fenced=None)
            await self._owner_event(tx, row["owner_id"], session_id, "session_title",
                                    {"title": clean})
            st.notify(session_id, owner_id, events=True, owner=True)
            return to_session(self.d, await self._locked(tx, session_id, None))

        return await self._write(op)

    async def delete_session(self, owner_id: str, session_id: str) -> None:
        async def op(tx: Tx, st: TxState) -> None:
            row = await self._locked(tx, session_id, owner_id)
            out = transition(lifecycle(row), Action.DELETE)
            extra = {} if row["status"] in TERMINAL else {"cancel_reason": "deleted"}
            await self._apply(tx, row, out.state, **extra)
            if out.cancelled_now:
                await self._end_events(tx, row, Status.CANCELLED, None, "deleted")
                await self._consume_inputs(tx, session_id)
            await self._owner_event(tx, owner_id, session_id, "session_deleted", {})
            st.notify(session_id, owner_id, work=True, events=out.cancelled_now, owner=True,
                      cancel=_aborts_run(row, out.state))

        await self._write(op)

    async def _consume_inputs(self, tx: Tx, session_id: str) -> None:
        """Messages waiting when a session is cancelled were cancelled with it."""
        await tx.execute(
            "UPDATE sessions SET delivered_input_seq = last_input_seq WHERE id = :id",
            {"id": session_id},
        )

    async def _end_events(
        self, tx: Tx, row: Row, status: Status, error: ErrorInfo | None, reason: str | None,
        extra: Sequence[NewEvent] = (), stamp: Lease | None = None,
    ) -> None:
        data: dict[str, Any] = {"status": status.value}
        if error is not None:
            data["error"] = {"code": error.code, "message": error.message}
        if reason is not None:
            data["reason"] = reason
        await self._append(tx, row["id"], [*extra, NewEvent("session_end", data)], fenced=None,
                           stamp=stamp)
        await self._owner_event(
            tx, row["owner_id"], row["id"], "session_status",
            {"status": status.value, "attempt": int(row["attempt"])},
        )

    async def request_cancel(
        self, owner_id: str, session_id: str, *, reason: str = "user"
    ) -> Session:
        async def op(tx: Tx, st: TxState) -> Session:
            row = await self._locked(tx, session_id, owner_id)
            out = transition(lifecycle(row), Action.REQUEST_CANCEL)
            if out.changed:
                await self._apply(tx, row, out.state, cancel_reason=reason)
                await self._owner_event(tx, owner_id, session_id, "session_cancel_requested",
                                        {"reason": reason})
                if out.cancelled_now:
                    await self._end_events(tx, row, Status.CANCELLED, None, reason)
                    await self._consume_inputs(tx, session_id)
                st.notify(session_id, owner_id, work=True, events=out.cancelled_now, owner=True,
                          cancel=_aborts_run(row, out.state))
            return to_session(self.d, await self._locked(tx, session_id, None))

        return await self._write(op)

    async def post_message(
        self,
        owner_id: str,
        session_id: str,
        text: str,
        *,
        mode: Delivery | str = Delivery.STEER,
        client_request_id: str | None = None,
    ) -> PostResult:
        _check_text(text)
        try:
            mode = Delivery(mode)
        except ValueError:
            raise InvalidInput(
                f"unknown mode {mode!r}; use steer, queue, interrupt or reject"
            ) from None
        if mode is Delivery.START:
            raise InvalidInput("unknown mode 'start'; use steer, queue, interrupt or reject")
        if client_request_id is not None and not (0 < len(client_request_id) <= 200):
            raise InvalidInput("client_request_id must be 1 to 200 characters")

        async def op(tx: Tx, st: TxState) -> PostResult:
            row = await self._locked(tx, session_id, owner_id)
            if client_request_id is not None:
                seen = await tx.fetch(
                    "SELECT seq, delivery, requeued FROM message_requests "
                    "WHERE session_id = :sid AND client_request_id = :crid",
                    {"sid": session_id, "crid": client_request_id},
                )
                if seen:
                    return PostResult(
                        int(seen[0]["seq"]), Delivery(seen[0]["delivery"]),
                        bool(seen[0]["requeued"]),
                    )
            state = lifecycle(row)
            in_flight = state.status is Status.RUNNING and not state.cancel_requested
            if mode is Delivery.REJECT and in_flight:
                raise SessionBusy(
                    "a run is in flight; retry later or send with mode steer, queue or interrupt"
                )
            delivery = mode if in_flight and mode is not Delivery.REJECT else Delivery.START
            out = transition(state, Action.POST_MESSAGE)
            requeued = out.changed
            data: dict[str, Any] = {"text": text, "delivery": delivery.value}
            if client_request_id is not None:
                data["client_request_id"] = client_request_id
            if requeued:
                await self._apply(tx, row, out.state, error_code=None, error_message=None)
            ev = await self._append(tx, session_id, [NewEvent("user_message", data)], fenced=None)
            seq = ev[0].seq
            await tx.execute(
                "UPDATE sessions SET last_input_seq = :seq WHERE id = :id",
                {"seq": seq, "id": session_id},
            )
            if requeued:
                await self._owner_event(tx, owner_id, session_id, "session_status",
                                        {"status": "queued", "attempt": 0})
            if client_request_id is not None:
                await tx.execute(
                    "INSERT INTO message_requests (session_id, client_request_id, seq, delivery, "
                    "requeued) VALUES (:sid, :crid, :seq, :delivery, :requeued)",
                    {"sid": session_id, "crid": client_request_id, "seq": seq,
                     "delivery": delivery.value, "requeued": requeued},
                )
            st.notify(session_id, owner_id, work=True, events=True, owner=requeued)
            return PostResult(seq, delivery, requeued)

        return await self._write(op)

    async def touch_watched(self, session_ids: Sequence[str]) -> None:
        if not session_ids:
            return

        async def op(tx: Tx, st: TxState) -> None:
            await tx.execute(
                f"UPDATE sessions SET watched_at = {self.d.now} WHERE id {self.d.in_ids}",
                {"ids": self.d.ids(list(session_ids))},
            )

        await self._write(op)

    # -- events, entries, snapshots ------------------------------------------------------

    async def append_events(
        self, session_id: str, events: Sequence[NewEvent], *, lease: Lease | None = None
    ) -> list[Event]:
        async def op(tx: Tx, st: TxState) -> list[Event]:
            return await self._append(tx, session_id, events, fenced=lease, st=st)

        return await self._write(op)

    async def read_events(
        self,
        session_id: str,
        *,
        after: int = 0,
        limit: int = 1000,
        owner_id: str | None = None,
    ) -> list[Event]:
        if after < 0 or limit < 1:
            raise InvalidInput("after must be >= 0 and limit >= 1")

        async def op(tx: Tx) -> list[Event]:
            if owner_id is not None:
                found = await tx.fetch(
                    "SELECT id FROM sessions WHERE id = :id AND owner_id = :owner "
                    "AND deleted_at IS NULL",
                    {"id": session_id, "owner": owner_id},
                )
                if not found:
                    raise NotFound(f"session {session_id} not found")
            rows = await tx.fetch(
                "SELECT * FROM session_events WHERE session_id = :sid AND seq > :after "
                "ORDER BY seq LIMIT :limit",
                {"sid": session_id, "after": after, "limit": limit},
            )
            return [to_event(self.d, r) for r in rows]

        return await self._read(op)

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
        clean = None if title is None else _check_title(title[:MAX_TITLE_CHARS])

        for ev in events:
            if ev.type not in EVENT_TYPES:
                raise InvalidInput(f"unknown event type {ev.type!r}")
        delivered = -1 if delivered_through is None else delivered_through

        async def op(tx: Tx, st: TxState) -> tuple[list[Entry], list[Event]]:
            # The fence check, the seq allocations and the delivery cursor in one statement:
            # this is the hot path of every turn.
            rows = await tx.fetch(
                "UPDATE sessions SET last_seq = last_seq + :ne, "
                "last_entry_seq = last_entry_seq + :nn, delivered_input_seq = CASE WHEN "
                ":d > delivered_input_seq AND :d <= last_input_seq THEN :d "
                f"ELSE delivered_input_seq END, updated_at = {self.d.now} "
                "WHERE id = :id AND lease_worker = :worker AND fence = :fence "
                "AND status = 'running' RETURNING last_seq, last_entry_seq, last_input_seq, "
                f"attempt, owner_id, title_state, {self.d.now} AS now",
                {"ne": len(events), "nn": len(entries), "d": delivered, "id": lease.session_id,
                 "worker": lease.worker, "fence": lease.fence},
            )
            if not rows:
                await self._raise_lost(tx, lease)
            head = rows[0]
            if delivered > int(head["last_input_seq"]):
                raise InvalidInput(f"no user message at seq {delivered}")
            out: list[Entry] = []
            if entries:
                first_entry = int(head["last_entry_seq"]) - len(entries) + 1
                out = await self._insert_entry_rows(tx, lease, entries, first_entry)
            written: list[Event] = []
            if events:
                written = await self._insert_events(
                    tx, lease.session_id, events, int(head["last_seq"]) - len(events) + 1,
                    head["now"], int(head["attempt"]), lease.fence, head["owner_id"], st,
                )
            if clean is not None:  # after the commit's events (session_start comes first)
                await self._auto_title(tx, st, head, lease, clean)
            return out, written

        return await self._write(op)

    async def _insert_entries(
        self, tx: Tx, row: Row, lease: Lease, entries: Sequence[tuple[str, dict[str, Any]]]
    ) -> list[Entry]:
        if not entries:
            return []
        first = int(row["last_entry_seq"]) + 1
        await tx.execute(
            "UPDATE sessions SET last_entry_seq = :last WHERE id = :id",
            {"last": first + len(entries) - 1, "id": lease.session_id},
        )
        return await self._insert_entry_rows(tx, lease, entries, first)

    async def _insert_entry_rows(
        self, tx: Tx, lease: Lease, entries: Sequence[tuple[str, dict[str, Any]]], first: int
    ) -> list[Entry]:
        await self._insert_rows(
            tx, "session_entries", _ENTRY_COLUMNS,
            [
                {"session_id": lease.session_id, "seq": first + i, "kind": kind,
                 "data": self.d.json(_scrub(data)), "fence": lease.fence}
                for i, (kind, data) in enumerate(entries)
            ],
        )
        return [
            Entry(lease.session_id, first + i, kind, dict(_scrub(data)), lease.fence)
            for i, (kind, data) in enumerate(entries)
        ]

    async def read_entries(self, session_id: str) -> list[Entry]:
        async def op(tx: Tx) -> list[Entry]:
            rows = await tx.fetch(
                "SELECT * FROM session_entries WHERE session_id = :sid ORDER BY seq",
                {"sid": session_id},
            )
            return [to_entry(self.d, r) for r in rows]

        return await self._read(op)

    async def save_snapshot(self, session_id: str, seq: int, state: dict[str, Any]) -> None:
        async def op(tx: Tx, st: TxState) -> None:
            await tx.execute(
                "INSERT INTO session_snapshots (session_id, seq, state) VALUES (:sid, :seq, "
                ":state) ON CONFLICT (session_id, seq) DO NOTHING",
                {"sid": session_id, "seq": seq, "state": self.d.json(_scrub(state))},
            )

        await self._write(op)

    async def load_snapshot(
        self, session_id: str, *, at_most: int | None = None
    ) -> tuple[int, dict[str, Any]] | None:
        async def op(tx: Tx) -> tuple[int, dict[str, Any]] | None:
            rows = await tx.fetch(
                "SELECT seq, state FROM session_snapshots WHERE session_id = :sid "
                "AND seq <= :at ORDER BY seq DESC LIMIT 1",
                {"sid": session_id, "at": at_most if at_most is not None else 2**62},
            )
            if not rows:
                return None
            return int(rows[0]["seq"]), self.d.load_json(rows[0]["state"])

        return await self._read(op)

    async def read_owner_events(
        self, owner_id: str, *, after: int = 0, limit: int = 1000
    ) -> list[OwnerEvent]:
        async def op(tx: Tx) -> list[OwnerEvent]:
            rows = await tx.fetch(
                "SELECT * FROM owner_events WHERE owner_id = :owner AND id > :after "
                "ORDER BY id LIMIT :limit",
                {"owner": owner_id, "after": after, "limit": limit},
            )
            return [to_owner_event(self.d, r) for r in rows]

        return await self._read(op)

    async def last_owner_event_id(self, owner_id: str) -> int:
        async def op(tx: Tx) -> int:
            rows = await tx.fetch("SELECT last_event_id FROM owners WHERE id = :id",
                                  {"id": owner_id})
            return int(rows[0]["last_event_id"]) if rows else 0

        return await self._read(op)

    # -- workers ---------------------------------------------------------------------------

    async def claim(
        self, worker: str, *, limit: int, lease_ttl: float, max_attempts: int = 5
    ) -> list[Claim]:
        if limit < 1:
            return []

        async def op(tx: Tx, st: TxState) -> list[Claim]:
            rows = await tx.fetch(
                f"SELECT s.*, (s.lease_expires_at < {self.d.now}) AS lease_expired "
                "FROM sessions s WHERE s.status = 'queued' OR (s.status = 'running' AND "
                f"(s.lease_worker IS NULL OR s.lease_expires_at < {self.d.now})) "
                f"ORDER BY s.id LIMIT :limit{self.d.skip_locked}",
                {"limit": limit},
            )
            claims: list[tuple[Row, Claim]] = []
            owner_events: list[tuple[str, str, str, dict[str, Any]]] = []
            for row in rows:
                before = lifecycle(row)
                out = transition(before, Action.CLAIM, max_attempts=max_attempts)
                assert out.claim_reason is not None
                sid, owner = row["id"], row["owner_id"]
                if out.run:
                    await self._apply(tx, row, out.state, lease_worker=worker)
                    await tx.execute(
                        f"UPDATE sessions SET lease_expires_at = {self.d.now} + "
                        f"{self.d.secs(':ttl')} WHERE id = :id",
                        {"ttl": lease_ttl, "id": sid},
                    )
                    lease: Lease | None = Lease(sid, worker, out.state.fence)
                    if before.status is not Status.RUNNING or before.attempt != out.state.attempt:
                        owner_events.append((owner, sid, "session_status",
                                             {"status": "running",
                                              "attempt": out.state.attempt}))
                    st.notify(sid, owner, owner=True)
                else:
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
                    data: dict[str, Any] = {"status": status.value}
                    if error is not None:
                        data["error"] = {"code": error.code, "message": error.message}
                    else:
                        data["reason"] = row["cancel_reason"] or "user"
                    await self._append(tx, sid, [NewEvent("session_end", data)], fenced=None)
                    owner_events.append((owner, sid, "session_status",
                                         {"status": status.value,
                                          "attempt": int(row["attempt"])}))
                    if (status is Status.CANCELLED
                            and int(row["last_input_seq"]) > int(row["delivered_input_seq"])):
                        revived = await self._revive_or_drop(tx, row, status, owner_event=False)
                        if revived:
                            owner_events.append((owner, sid, "session_status",
                                                 {"status": "queued", "attempt": 0}))
                    lease = None
                    st.notify(sid, owner, events=True, owner=True)
                claims.append((row, Claim(None, out.claim_reason, lease)))  # type: ignore[arg-type]
            # Owner rows are locked last and in one order, so concurrent claims cannot deadlock.
            for owner, sid, type_, data in sorted(owner_events, key=lambda e: (e[0], e[1])):
                await self._owner_event(tx, owner, sid, type_, data)
            result = []
            for row, c in claims:
                fresh = await tx.fetch(self._select_session("s.id = :id", False),
                                       {"id": row["id"]})
                result.append(Claim(to_session(self.d, fresh[0]), c.reason, c.lease))
            return result

        return await self._write(op)

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
        """Extend every lease still matching (worker, fence); return id and cancel flag."""

    async def park(self, lease: Lease, *, reason: str = "shutdown") -> None:
        async def op(tx: Tx, st: TxState) -> None:
            row = await self._fenced(tx, lease)
            out = transition(_held(row), Action.PARK)
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
    ) -> Session:
        """End the run; `entries` and `events` (before `session_end`) commit with it, so a
        cancel costs one transaction from abort to settled."""
        status = Status(status)
        if status not in TERMINAL:
            raise InvalidInput(f"cannot settle with status {status.value!r}")

        async def op(tx: Tx, st: TxState) -> Session:
            row = await self._fenced(tx, lease)
            final = status
            if final is Status.SUCCEEDED and row["cancel_requested_at"] is not None:
                # A cancel accepted while the run was finishing is honoured, not overtaken.
                final = Status.CANCELLED
            pending = int(row["last_input_seq"]) > int(row["delivered_input_seq"])
            if final is Status.SUCCEEDED and pending:
                raise PendingInput("a user message arrived; deliver it before settling")
            out = transition(_held(row), _SETTLE_ACTION[final])
            await self._insert_entries(tx, row, lease, entries)
            reason = row["cancel_reason"] if final is Status.CANCELLED else None
            await self._apply(
                tx, row, out.state,
                error_code=error.code if error else None,
                error_message=error.message if error else None,
            )
            await self._end_events(tx, row, final, error, reason, events, stamp=lease)
            if pending:
                await self._revive_or_drop(tx, row, final)
            st.notify(lease.session_id, row["owner_id"], work=pending, events=True, owner=True)
            return to_session(self.d, await self._locked(tx, lease.session_id, None))

        return await self._write(op)

    async def _revive_or_drop(
        self, tx: Tx, row: Row, status: Status, *, owner_event: bool = True
    ) -> bool:
        """Undelivered messages at a failed or cancelled end are never silently lost.

        After a failure they stay undelivered: the next message revives the session and the
        run delivers them all. At a cancel, messages sent after the cancel request start a new
        run at once (as if sent after the end); those sent before it were cancelled with the
        run and count as consumed.
        """
        if status is not Status.CANCELLED:
            return False
        after_cancel: list[Row] = []
        if row["cancel_requested_at"] is not None:
            after_cancel = await tx.fetch(
                "SELECT seq FROM session_events WHERE session_id = :sid AND seq > :cur "
                "AND type = 'user_message' AND ts >= :at ORDER BY seq LIMIT 1",
                {"sid": row["id"], "cur": row["delivered_input_seq"],
                 "at": row["cancel_requested_at"]},
            )
        if after_cancel:
            current = await self._locked(tx, row["id"], None)
            out = transition(lifecycle(current), Action.POST_MESSAGE)
            await self._apply(tx, current, out.state, error_code=None, error_message=None)
            if owner_event:
                await self._owner_event(tx, row["owner_id"], row["id"], "session_status",
                                        {"status": "queued", "attempt": 0})
            await tx.execute(
                "UPDATE sessions SET delivered_input_seq = :seq WHERE id = :id",
                {"seq": int(after_cancel[0]["seq"]) - 1, "id": row["id"]},
            )
            return True
        await self._consume_inputs(tx, row["id"])
        return False

    async def undelivered_inputs(self, session_id: str) -> list[Event]:
        async def op(tx: Tx) -> list[Event]:
            rows = await tx.fetch(
                "SELECT e.* FROM session_events e JOIN sessions s ON s.id = e.session_id "
                "WHERE e.session_id = :sid AND e.seq > s.delivered_input_seq "
                "AND e.type = 'user_message' ORDER BY e.seq",
                {"sid": session_id},
            )
            return [to_event(self.d, r) for r in rows]

        return await self._read(op)

    async def mark_delivered(self, lease: Lease, seq: int) -> None:
        async def op(tx: Tx, st: TxState) -> None:
            row = await self._fenced(tx, lease)
            if seq > int(row["last_input_seq"]):
                raise InvalidInput(f"no user message at seq {seq} to mark delivered")
            if seq > int(row["delivered_input_seq"]):
                await tx.execute(
                    "UPDATE sessions SET delivered_input_seq = :seq WHERE id = :id",
                    {"seq": seq, "id": lease.session_id},
                )

        await self._write(op)

    async def set_stage(self, lease: Lease, stage: str) -> None:
        async def op(tx: Tx, st: TxState) -> None:
            row = await self._fenced(tx, lease)
            await tx.execute("UPDATE sessions SET stage = :stage WHERE id = :id",
                             {"stage": stage, "id": lease.session_id})
            await self._append(tx, lease.session_id, [NewEvent("stage", {"stage": stage})],
                               fenced=None, stamp=lease)
            await self._owner_event(tx, row["owner_id"], lease.session_id,
                                    "session_active_stage", {"stage": stage})
            st.notify(lease.session_id, row["owner_id"], events=True, owner=True)

        await self._write(op)

    async def set_auto_title(self, lease: Lease, title: str) -> bool:
        clean = _check_title(title[:MAX_TITLE_CHARS])

        async def op(tx: Tx, st: TxState) -> bool:
            return await self._auto_title(tx, st, await self._fenced(tx, lease), lease, clean)

        return await self._write(op)

    async def _auto_title(self, tx: Tx, st: TxState, row: Row, lease: Lease, clean: str
                          ) -> bool:
        """A title the person set by hand is never overwritten."""
        if row["title_state"] == "manual":
            return False
        await tx.execute(
            "UPDATE sessions SET title = :t, title_state = 'automatic' WHERE id = :id",
            {"t": clean, "id": lease.session_id},
        )
        await self._append(tx, lease.session_id, [NewEvent("title", {"title": clean})],
                           fenced=None, stamp=lease)
        await self._owner_event(tx, row["owner_id"], lease.session_id, "session_title",
                                {"title": clean})
        st.notify(lease.session_id, row["owner_id"], events=True, owner=True)
        return True

    async def cancel_abandoned(self) -> list[str]:
        async def op(tx: Tx, st: TxState) -> list[str]:
            rows = await tx.fetch(
                "SELECT id, owner_id FROM sessions WHERE status = 'running' "
                "AND abandon_after IS NOT NULL AND cancel_requested_at IS NULL "
                f"AND COALESCE(watched_at, created_at) + {self.d.secs('abandon_after')} < "
                f"{self.d.now} ORDER BY id{self.d.skip_locked}",
            )
            for r in sorted(rows, key=lambda r: (r["owner_id"], r["id"])):
                await tx.execute(
                    f"UPDATE sessions SET cancel_requested_at = {self.d.now}, "
                    "cancel_reason = 'abandoned' WHERE id = :id",
                    {"id": r["id"]},
                )
                await self._owner_event(tx, r["owner_id"], r["id"], "session_cancel_requested",
                                        {"reason": "abandoned"})
                st.notify(r["id"], r["owner_id"], work=True, owner=True, cancel=True)
            return [r["id"] for r in rows]

        return await self._write(op)

    async def count_by_status(self) -> dict[str, int]:
        """Sessions by status over the whole database (for metrics; not owner-scoped)."""

        async def op(tx: Tx) -> dict[str, int]:
            rows = await tx.fetch(
                "SELECT status, COUNT(*) AS n FROM sessions WHERE deleted_at IS NULL "
                "GROUP BY status"
            )
            counts = {s.value: 0 for s in Status}
            counts.update({r["status"]: int(r["n"]) for r in rows})
            return counts

        return await self._read(op)

    async def ping(self) -> None:
        """Raises if the database cannot be reached (health checks)."""

        async def op(tx: Tx) -> None:
            await tx.fetch("SELECT 1 AS one")

        await self._read(op)
