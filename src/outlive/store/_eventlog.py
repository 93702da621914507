"""The logs: a session's events, its snapshots, and each owner's lifecycle events."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..domain.errors import NotFound
from ..domain.model import Entry, Event, Lease, NewEvent, OwnerEvent
from ._base import Row, Tx, TxState, to_entry, to_owner_event
from ._core import StoreCore
from ._validation import check_read_window, scrub

__all__ = ["EventLogOps"]

_NO_LIMIT = 2**62


class EventLogOps(StoreCore):
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
        check_read_window(after, limit)

        async def op(tx: Tx) -> list[Event]:
            if owner_id is not None and not await tx.fetch(
                self.q.owned_session_exists, {"id": session_id, "owner": owner_id}
            ):
                raise NotFound(f"session {session_id} not found")
            rows = await tx.fetch(self.q.read_events,
                                  {"sid": session_id, "after": after, "limit": limit})
            return await self._events(tx, session_id, rows)

        return await self._read(op)

    async def read_landmarks(self, session_id: str, *, upto: int) -> list[Event]:
        """Events 1..upto without the text deltas: enough to date every transcript item
        (the snapshot a page starts from has no times) at a fraction of the log's size."""

        async def op(tx: Tx) -> list[Event]:
            rows = await tx.fetch(self.q.read_landmarks, {"sid": session_id, "upto": upto})
            return await self._events(tx, session_id, rows)

        return await self._read(op)

    async def read_events_many(
        self, after: Mapping[str, int], *, limit: int = 1000
    ) -> dict[str, list[Event]]:
        """Each session's events after its cursor (at most `limit` per session), in one read:
        the API's fan-out reads every session that has news at once rather than one query
        per session."""
        for cursor in after.values():
            check_read_window(cursor, limit)
        if not after:
            return {}

        async def op(tx: Tx) -> dict[str, list[Event]]:
            rows: dict[str, list[Row]] = {sid: [] for sid in after}
            for r in await self._read_events_many(tx, after, limit):
                rows[r["session_id"]].append(r)
            # A compacted session's message_end rows point at their entries: give the text back.
            return {sid: await self._events(tx, sid, rs) for sid, rs in rows.items()}

        return await self._read(op)

    async def _read_events_many(
        self, tx: Tx, after: Mapping[str, int], limit: int
    ) -> list[Row]:
        """The rows of `read_events_many`, each session's in seq order. One `read_events` per
        session in the same transaction; PostgreSQL does it in one statement."""
        rows: list[Row] = []
        for sid, cursor in after.items():
            rows.extend(await tx.fetch(self.q.read_events,
                                       {"sid": sid, "after": cursor, "limit": limit}))
        return rows

    async def read_entries(self, session_id: str) -> list[Entry]:
        async def op(tx: Tx) -> list[Entry]:
            rows = await tx.fetch(self.q.read_entries, {"sid": session_id})
            return [to_entry(self.d, r) for r in rows]

        return await self._read(op)

    async def save_snapshot(self, session_id: str, seq: int, state: dict[str, Any]) -> None:
        async def op(tx: Tx, st: TxState) -> None:
            await tx.execute(self.q.insert_snapshot,
                             {"sid": session_id, "seq": seq, "state": self.d.json(scrub(state))})

        await self._write(op)

    async def load_snapshot(
        self, session_id: str, *, at_most: int | None = None
    ) -> tuple[int, dict[str, Any]] | None:
        async def op(tx: Tx) -> tuple[int, dict[str, Any]] | None:
            rows = await tx.fetch(
                self.q.load_snapshot,
                {"sid": session_id, "at_most": at_most if at_most is not None else _NO_LIMIT},
            )
            if not rows:
                return None
            state = await self._snapshot_state(tx, session_id,
                                               self.d.load_json(rows[0]["state"]))
            return int(rows[0]["seq"]), state

        return await self._read(op)

    async def _number_owner_log(self, owner_id: str) -> int:
        """Give ids to the owner's committed events that have none, before a read (how
        many). SQLite numbers them as they are written: nothing waits."""
        return 0

    async def number_owner_events(self) -> int:
        """Every owner's events without an id numbered (the storage sweep's part, so they
        get ids with no reader); how many. Nothing to do on SQLite."""
        return 0

    async def read_owner_events(
        self, owner_id: str, *, after: int = 0, limit: int = 1000
    ) -> list[OwnerEvent]:
        await self._number_owner_log(owner_id)

        async def op(tx: Tx) -> list[OwnerEvent]:
            rows = await tx.fetch(self.q.read_owner_events,
                                  {"owner": owner_id, "after": after, "limit": limit})
            return [to_owner_event(self.d, r) for r in rows]

        return await self._read(op)

    async def last_owner_event_id(self, owner_id: str) -> int:
        await self._number_owner_log(owner_id)

        async def op(tx: Tx) -> int:
            rows = await tx.fetch(self.q.last_owner_event_id, {"id": owner_id})
            return int(rows[0]["last_event_id"]) if rows else 0

        return await self._read(op)
