"""The adapter seam and the steps every Store operation shares inside its transaction.

Each public Store method is one transaction (`_write` or `_read`, supplied by the adapter).
Lifecycle changes go through the pure status machine (`domain.status.transition`) on a row
read under lock (`FOR UPDATE` on PostgreSQL, the `BEGIN IMMEDIATE` write lock on SQLite), so
the database can only ever hold states the machine allows. Worker writes name (worker, fence);
a stale one changes nothing and raises `LeaseLost`.
"""

from __future__ import annotations

import abc
import functools
import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any, NoReturn, TypeVar

import orjson

from ..domain.approvals import CANCELLED
from ..domain.errors import NotFound
from ..domain.events import OwnerPayload
from ..domain.model import (
    TERMINAL,
    Entry,
    ErrorInfo,
    Event,
    Lease,
    NewEvent,
    Session,
    Status,
)
from ..domain.status import Action, Lifecycle, transition
from ._base import (
    TEXT_REF,
    Dialect,
    QueryHook,
    Row,
    Tx,
    TxState,
    entry_ref,
    lease_lost,
    lifecycle,
    raise_lost,
    text_ref,
    to_event,
    to_session,
)
from ._lifecycle import session_end, status_event
from ._outbox import Outbox
from ._port import Subscription
from ._queries import Queries, queries_for
from ._validation import check_event_types, scrub, scrub_json

__all__ = [
    "ENTRY_COLUMNS", "EVENT_COLUMNS", "OWNER_EVENT_COLUMNS", "TEXT_REF", "OwnerEvent",
    "StoreCore", "entry_ref", "lease_lost",
]

T = TypeVar("T")

_INSERT_CHUNK = 100
EVENT_COLUMNS = ("session_id", "seq", "ts", "attempt", "fence", "type", "data")
ENTRY_COLUMNS = ("session_id", "seq", "kind", "data", "fence")
OWNER_EVENT_COLUMNS = ("owner_id", "id", "session_id", "ts", "type", "data")

OwnerEvent = tuple[str, str, OwnerPayload]
"""An owner event not yet written: owner, session, payload."""


@functools.cache
def _values_sql(table: str, columns: tuple[str, ...], n: int) -> str:
    values = ", ".join("(" + ", ".join(f":{c}_{i}" for c in columns) + ")" for i in range(n))
    return f"INSERT INTO {table} ({', '.join(columns)}) VALUES {values}"


class StoreCore(Outbox, abc.ABC):
    """What every area of the Store builds on; adapters supply transactions and notices."""

    on_query: QueryHook | None = None
    """Set to record the name of every statement this store runs (tests)."""

    def __init__(self, d: Dialect) -> None:
        self.d = d
        self.q: Queries = queries_for(d)

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
    def subscribe(self, *, reads: bool = True) -> Subscription: ...

    # -- the log as written ---------------------------------------------------------------

    async def _events(self, tx: Tx, session_id: str, rows: Sequence[Row]) -> list[Event]:
        """Events from their rows, each compacted `message_end` given back the text it points
        at, so every reader (folds, replays, the OpenAI surface) sees the log as written."""
        events = [to_event(self.d, r) for r in rows]
        refs = [entry_ref(e) for e in events]
        wanted = [r for r in refs if r is not None]
        if not wanted:
            return events
        texts = await self._entry_texts(tx, session_id, wanted)
        return [e if ref is None else replace(e, data={**e.data, "text": texts[ref]})
                for e, ref in zip(events, refs, strict=True)]

    async def _entry_texts(self, tx: Tx, session_id: str, seqs: Sequence[int]) -> dict[int, Any]:
        found = await tx.fetch(self.q.assistant_texts,
                               {"sid": session_id, "lo": min(seqs), "hi": max(seqs)})
        return {int(r["seq"]): self.d.load_json(r["data"]).get("text") for r in found}

    async def _snapshot_state(self, tx: Tx, session_id: str, state: Any) -> Any:
        """A stored snapshot with the answers a compaction left as pointers (`{"$entry":
        seq}`, as in `message_end`) given back their text from the entries."""
        items = state.get("items") if isinstance(state, dict) else None
        if not isinstance(items, list):
            return state
        refs = [text_ref(item) for item in items]
        wanted = [r for r in refs if r is not None]
        if not wanted:
            return state
        texts = await self._entry_texts(tx, session_id, wanted)
        return {**state, "items": [item if ref is None else {**item, "text": texts[ref]}
                                   for item, ref in zip(items, refs, strict=True)]}

    # -- rows under lock ------------------------------------------------------------------

    async def _locked(self, tx: Tx, session_id: str, owner_id: str | None) -> Row:
        if owner_id is None:
            rows = await tx.fetch(self.q.lock_session, {"id": session_id})
        else:
            rows = await tx.fetch(self.q.lock_owned_session,
                                  {"id": session_id, "owner": owner_id})
        if not rows:
            raise NotFound(f"session {session_id} not found")
        return rows[0]

    async def _write_session(self, fn: Callable[[Tx, TxState], Awaitable[str]]) -> Session:
        """A write that answers with the session it changed (`fn` returns its id), read
        with the commit (`TxState.read_with_commit`) rather than in a round trip before."""

        async def op(tx: Tx, st: TxState) -> TxState:
            st.read_with_commit(self.q.get_session, {"id": await fn(tx, st)})
            return st

        st = await self._write(op)
        return to_session(self.d, st.last_rows[0][0])

    async def _fenced(self, tx: Tx, lease: Lease) -> Row:
        """The session's row, locked, if `lease` still holds it. A lease that lapsed with
        nobody claiming the session since still holds it: the fence is what decides."""
        row = await self._locked(tx, lease.session_id, None)
        if (
            row["lease_worker"] != lease.worker
            or int(row["fence"]) != lease.fence
            or row["status"] != Status.RUNNING
        ):
            raise_lost(lease)
        return row

    async def _raise_lost(self, tx: Tx, lease: Lease) -> NoReturn:
        """A fenced write matched no row: the session is gone, or the lease is."""
        if not await tx.fetch(self.q.session_exists, {"id": lease.session_id}):
            raise NotFound(f"session {lease.session_id} not found")
        raise_lost(lease)

    async def _apply(self, tx: Tx, row: Row, new: Lifecycle, *, lease_ttl: float | None = None,
                     st: TxState | None = None, **extra: Any) -> None:
        """Write a lifecycle from the status machine back to its row; `lease_ttl`: a lease
        taken, expiring that many seconds from now (database clock), in the same UPDATE; `st`
        for the notices of what the change starts (a parent its child's end wakes)."""
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
        elif lease_ttl is not None:
            sets.append(f"lease_expires_at = {self.d.now} + {self.d.secs(':lease_ttl')}")
            params["lease_ttl"] = lease_ttl
        if not new.cancel_requested:
            sets.append("cancel_requested_at = NULL")
            if "cancel_reason" not in extra:
                sets.append("cancel_reason = NULL")
        elif row["cancel_requested_at"] is None:
            sets.append(f"cancel_requested_at = {self.d.now}")
        if not new.awaiting_children and row["awaiting_children"] and (
                "awaiting_children" not in extra):
            sets.append("awaiting_children = 0")
        if new.deleted and row["deleted_at"] is None:
            sets.append(f"deleted_at = {self.d.now}")
        if "attention" not in extra and new.status.value != row["status"]:
            sets.append("attention = NULL")  # any other change of status answers it
        if new.status in TERMINAL and Status(row["status"]) not in TERMINAL:
            sets.append(f"ended_at = {self.d.now}")  # the clock of compaction and retention
        elif new.status not in TERMINAL and row["ended_at"] is not None:
            sets.append("ended_at = NULL")
        for key, value in extra.items():
            sets.append(f"{key} = :{key}")
            params[key] = value
        sql = f"UPDATE sessions SET {', '.join(sets)} WHERE id = :id"
        await tx.execute(self.q.dynamic("update_lifecycle", sql), params)
        await self._webhook_outbox(tx, row, new, extra)
        if new.status in TERMINAL and row["parent_call_id"] is not None:
            await self._child_ended(tx, st, row, new, extra)

    @abc.abstractmethod
    async def _child_ended(self, tx: Tx, st: TxState | None, row: Row, new: Lifecycle,
                           extra: Mapping[str, Any]) -> None:
        """A child session of a delegation call ended (`_children.py` reports it)."""

    # -- logs ------------------------------------------------------------------------------

    async def _append(
        self, tx: Tx, session_id: str, events: Sequence[NewEvent], *, fenced: Lease | None,
        st: TxState | None = None, stamp: Lease | None = None,
    ) -> list[Event]:
        """Allocate gapless seqs through `sessions.last_seq` and insert the events; with `st`,
        queue the session's `events` notice too. Events carry the fence of the lease that
        wrote them (`fenced` or `stamp`), else the session's current one (API writes)."""
        if not events:
            return []
        check_event_types(events)
        n = len(events)
        if fenced is None:
            rows = await tx.fetch(self.q.allocate_seqs, {"n": n, "id": session_id})
            if not rows:
                raise NotFound(f"session {session_id} not found")
        else:
            rows = await tx.fetch(
                self.q.allocate_seqs_fenced,
                {"n": n, "id": session_id, "worker": fenced.worker, "fence": fenced.fence},
            )
            if not rows:
                await self._raise_lost(tx, fenced)
        head = rows[0]
        fence = stamp.fence if stamp is not None else int(head["fence"])
        return await self._insert_events(
            tx, session_id, events, int(head["last_seq"]) - n + 1, head["now"],
            int(head["attempt"]), fence, head["owner_id"], st,
        )

    async def _append_locked(
        self, tx: Tx, row: Row, events: Sequence[NewEvent], *, stamp: Lease
    ) -> list[Event]:
        """`_append` for a session whose row (from `lock_session`) this transaction holds and
        has appended nothing to since: its next seqs and its time are known, so no round
        trip. Stamped with the fence of `stamp`."""
        if not events:
            return []
        check_event_types(events)
        await tx.execute(self.q.bump_seqs, {"n": len(events), "id": row["id"]})
        return await self._insert_events(
            tx, row["id"], events, int(row["last_seq"]) + 1, row["now"], int(row["attempt"]),
            stamp.fence, row["owner_id"], None,
        )

    async def _insert_events(
        self, tx: Tx, session_id: str, events: Sequence[NewEvent], first: int, now: Any,
        attempt: int, fence: int, owner_id: str, st: TxState | None,
    ) -> list[Event]:
        """Insert events at seqs first.. (already allocated in `sessions.last_seq`)."""
        rows, out = self._event_rows(session_id, events, first, now, attempt, fence)
        await self._insert_rows(tx, "session_events", EVENT_COLUMNS, rows)
        if st is not None:
            st.notify(session_id, owner_id, events=True)
        return out

    async def _insert_events_now(
        self, tx: Tx, events: Sequence[tuple[str, int, int, int, NewEvent]]
    ) -> None:
        """Insert (session id, seq, attempt, fence, event) at seqs already allocated, stamped
        by the database clock in the INSERT itself: sent with the rest of the transaction,
        it waits for no round trip to learn the time first."""
        if not events:
            return
        check_event_types([ev for *_, ev in events])
        rows = []
        for sid, seq, attempt, fence, ev in events:
            data, raw = scrub_json(ev.data)
            rows.append({"session_id": sid, "seq": seq, "attempt": attempt, "fence": fence,
                         "type": ev.type, "data": data if raw is None else orjson.Fragment(raw)})
        try:
            payload = orjson.dumps(rows).decode()
        except TypeError:  # data orjson cannot write (an int past 64 bits…): the slow way
            payload = json.dumps([{**r, "data": scrub(ev.data)}
                                  for r, (*_, ev) in zip(rows, events, strict=True)],
                                 separators=(",", ":"))
        await tx.execute(self.q.insert_events_now, {"rows": payload})

    def _event_rows(
        self, session_id: str, events: Sequence[NewEvent], first: int, now: Any, attempt: int,
        fence: int,
    ) -> tuple[list[dict[str, Any]], list[Event]]:
        """The rows to insert for events at seqs first.., and the events they are."""
        ts = self.d.ts(now)
        assert ts is not None
        rows, out = [], []
        json_raw = self.d.json_raw
        for seq, ev in enumerate(events, first):
            data, raw = scrub_json(ev.data)
            rows.append({"session_id": session_id, "seq": seq, "ts": now,
                         "attempt": attempt, "fence": fence, "type": ev.type,
                         "data": json_raw(data, raw)})
            out.append(Event(session_id, seq, ts, attempt, fence, ev.type, dict(data)))
        return rows, out

    async def _insert_entries(
        self, tx: Tx, row: Row, lease: Lease, entries: Sequence[tuple[str, dict[str, Any]]]
    ) -> list[Entry]:
        """The entries a lease's own write holds, after the row's last (`row` locked by
        `tx`): their seqs allocated on the session row, then inserted."""
        if not entries:
            return []
        first = int(row["last_entry_seq"]) + 1
        await tx.execute(self.q.set_last_entry_seq,
                         {"last": first + len(entries) - 1, "id": lease.session_id})
        return await self._insert_entry_rows(tx, lease, entries, first)

    async def _insert_entry_rows(
        self, tx: Tx, lease: Lease, entries: Sequence[tuple[str, dict[str, Any]]], first: int
    ) -> list[Entry]:
        """Insert model-history entries at seqs first.. (already allocated)."""
        rows, out = self._entry_rows(lease, entries, first)
        await self._insert_rows(tx, "session_entries", ENTRY_COLUMNS, rows)
        return out

    def _entry_rows(
        self, lease: Lease, entries: Sequence[tuple[str, dict[str, Any]]], first: int
    ) -> tuple[list[dict[str, Any]], list[Entry]]:
        rows, out = [], []
        sid, fence, json_raw = lease.session_id, lease.fence, self.d.json_raw
        for seq, (kind, data) in enumerate(entries, first):
            clean, raw = scrub_json(data)
            rows.append({"session_id": sid, "seq": seq, "kind": kind,
                         "data": json_raw(clean, raw), "fence": fence})
            out.append(Entry(sid, seq, kind, dict(clean), fence))
        return rows, out

    async def _insert_rows(
        self, tx: Tx, table: str, columns: tuple[str, ...], rows: Sequence[Mapping[str, Any]]
    ) -> None:
        """One multi-row INSERT per chunk: a statement (and a round trip) per batch, not per
        row. Chunks stay far below SQLite's bound-parameter limit."""
        for start in range(0, len(rows), _INSERT_CHUNK):
            chunk = rows[start : start + _INSERT_CHUNK]
            params: dict[str, Any] = {}
            for i, r in enumerate(chunk):
                params.update({f"{c}_{i}": r[c] for c in columns})
            sql = _values_sql(table, columns, len(chunk))
            await tx.execute(self.q.dynamic(f"insert_{table}", sql), params)

    async def _insert_logs(self, tx: Tx, en_rows: Sequence[Mapping[str, Any]],
                           ev_rows: Sequence[Mapping[str, Any]]) -> None:
        """A write's entry rows, then its event rows (PostgreSQL sends both in one
        statement: one fewer for the driver to send per write)."""
        await self._insert_rows(tx, "session_entries", ENTRY_COLUMNS, en_rows)
        await self._insert_rows(tx, "session_events", EVENT_COLUMNS, ev_rows)

    async def _owner_event(
        self, tx: Tx, owner_id: str, session_id: str, payload: OwnerPayload
    ) -> None:
        await tx.execute(self.q.next_owner_event_id, {"id": owner_id})
        await tx.execute(
            self.q.insert_owner_event,
            {"owner": owner_id, "sid": session_id, "type": payload.TYPE,
             "data": self.d.json(payload.data())},
        )

    async def _owner_events(self, tx: Tx, events: Sequence[OwnerEvent]) -> None:
        """Many owner events at once: per owner in owner order, one update reserves their
        ids (and stamps them with the database clock) and one statement inserts them (an
        owner with one event: `_owner_event`, whose statements need no round trip)."""
        by_owner: dict[str, list[OwnerEvent]] = {}
        for ev in events:
            by_owner.setdefault(ev[0], []).append(ev)
        rows: list[dict[str, Any]] = []
        for owner in sorted(by_owner):
            mine = by_owner[owner]
            if len(mine) == 1:  # one event: two pipelined statements, no round trip
                await self._owner_event(tx, *mine[0])
                continue
            last = await tx.fetch(self.q.reserve_owner_event_ids, {"id": owner, "n": len(mine)})
            first = int(last[0]["last_event_id"]) - len(mine) + 1
            now = last[0]["now"]
            rows.extend({"owner_id": owner, "id": first + k, "session_id": sid, "ts": now,
                         "type": p.TYPE, "data": self.d.json(p.data())}
                        for k, (_, sid, p) in enumerate(mine))
        await self._insert_rows(tx, "owner_events", OWNER_EVENT_COLUMNS, rows)

    async def _end_events(
        self, tx: Tx, row: Row, status: Status, error: ErrorInfo | None, reason: str | None,
        extra: Sequence[NewEvent] = (), stamp: Lease | None = None, *,
        attention: str | None = None, dropped: Sequence[int] = (), locked: bool = False,
    ) -> None:
        """`session_end` (after `extra`) and the owner's `session_status`. `locked`: `row`
        is this transaction's lock of the session, with no event appended since
        (`_append_locked`)."""
        end = session_end(status, error, reason, attention=attention, dropped=dropped)
        if locked and stamp is not None:
            await self._append_locked(tx, row, [*extra, end], stamp=stamp)
        else:
            await self._append(tx, row["id"], [*extra, end], fenced=None, stamp=stamp)
        await self._owner_event(tx, row["owner_id"], row["id"],
                                status_event(status, int(row["attempt"]), attention, error))

    async def _dropped_inputs(self, tx: Tx, row: Row) -> list[int]:
        """The waiting user messages a cancel ending now drops (`_revive_or_drop`): all of
        them, but for those sent after the cancel request, which start the next run."""
        if int(row["last_input_seq"]) <= int(row["delivered_input_seq"]):
            return []
        waiting = await tx.fetch(self.q.waiting_input_seqs,
                                 {"sid": row["id"], "cur": row["delivered_input_seq"]})
        seqs = [int(r["seq"]) for r in waiting]
        if row["cancel_requested_at"] is not None:
            after = await tx.fetch(
                self.q.first_input_after_cancel,
                {"sid": row["id"], "cur": row["delivered_input_seq"],
                 "at": row["cancel_requested_at"]},
            )
            if after:
                seqs = [s for s in seqs if s < int(after[0]["seq"])]
        return seqs

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
                self.q.first_input_after_cancel,
                {"sid": row["id"], "cur": row["delivered_input_seq"],
                 "at": row["cancel_requested_at"]},
            )
        if after_cancel:
            current = await self._locked(tx, row["id"], None)
            out = transition(lifecycle(current), Action.POST_MESSAGE)
            await self._apply(tx, current, out.state, error_code=None, error_message=None)
            if owner_event:
                await self._owner_event(tx, row["owner_id"], row["id"],
                                        status_event(Status.QUEUED, 0))
            await tx.execute(self.q.set_delivered_input_seq,
                             {"seq": int(after_cancel[0]["seq"]) - 1, "id": row["id"]})
            return True
        await self._consume_inputs(tx, row["id"])
        return False

    async def _cancel_approval(self, tx: Tx, row: Row) -> None:
        """A session that ends while it waits on an approval settles it (a denial with reason
        `cancelled`): nobody can decide it later, and a follow-up's run tells the model the
        call did not run instead of asking again."""
        if row["attention"] in ("approval", "tool"):
            await tx.execute(self.q.cancel_pending_approvals,
                             {"sid": row["id"], "reason": CANCELLED})

    async def _consume_inputs(self, tx: Tx, session_id: str) -> None:
        """Messages waiting when a session is cancelled were cancelled with it."""
        await tx.execute(self.q.consume_inputs, {"id": session_id})
