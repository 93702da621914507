"""The owner log on PostgreSQL, numbered after commit (docs/architecture.md, "The owner
stream").

A write inserts its owner events with no id: their `gid` comes from a sequence, which takes
no lock, so writes of one owner's sessions no longer wait for each other on the owner's row
(it used to be the counter, bumped and held locked to every such write's COMMIT). The ids a
reader sees, 1, 2, 3... per owner, are given by the sequencer here: under a per-owner
advisory lock, in one transaction, the owner's committed unnumbered rows get the next ids in
gid order and `owners.last_event_id` moves past them. Only committed rows are seen and
numberings of one owner follow each other, so the numbered rows are always 1..last with
nothing to come below `last`: a reader resuming after N misses nothing and never sees an
event turn up later at an id it has passed. A row that commits after rows with a larger gid
were numbered simply gets the next id.

Who numbers: every reader of the log, first (`read_owner_events`, `last_owner_event_id`: a
probe, and a short write only when rows wait), and the worker's storage sweep
(`number_owner_events`), so rows get ids with no reader. Writes never do, which keeps their
COMMIT the only flush they cost.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import orjson

from ..domain.events import OwnerPayload
from ._base import Tx, TxState
from ._core import OwnerEvent, StoreCore

__all__ = ["PgOwnerLog", "json_param"]

_BATCH = 100
"""Owners numbered per round of the sweep (one short transaction each)."""


def json_param(value: Any) -> str:
    """A statement's rows as one JSON parameter (`jsonb_to_recordset`): one orjson call in C
    instead of an array per column that the driver adapts value by value in Python."""
    try:
        return orjson.dumps(value).decode()
    except TypeError:  # a title with a lone surrogate, an id past 64 bits: not ours
        return json.dumps(value, separators=(",", ":"))


class PgOwnerLog(StoreCore):
    async def _owner_event(
        self, tx: Tx, owner_id: str, session_id: str, payload: OwnerPayload
    ) -> None:
        await self._owner_events(tx, [(owner_id, session_id, payload)])

    async def _owner_events(self, tx: Tx, events: Sequence[OwnerEvent]) -> None:
        """One INSERT per owner, in the events' order, and no round trip: no id to wait for."""
        by_owner: dict[str, list[OwnerEvent]] = {}
        for ev in events:
            by_owner.setdefault(ev[0], []).append(ev)
        for owner in sorted(by_owner):
            rows = [{"k": k, "session_id": sid, "type": p.TYPE, "data": p.data()}
                    for k, (_, sid, p) in enumerate(by_owner[owner], 1)]
            await tx.execute(self.q.insert_pending_owner_events,
                             {"owner": owner, "rows": json_param(rows)})

    async def _number_owner_log(self, owner_id: str, *, wait: bool = True) -> int:
        """Number the owner's committed events that have no id yet; how many. A reader calls
        it before it reads, so it sees every event committed before it asked: it waits for
        the lock. The sweep (`wait=False`) leaves an owner another is numbering."""

        async def pending(tx: Tx) -> bool:
            return bool(await tx.fetch(self.q.owner_log_pending, {"owner": owner_id}))

        if not await self._read(pending):
            return 0

        async def op(tx: Tx, st: TxState) -> int:
            if wait:
                await tx.execute(self.q.lock_owner_log, {"owner": owner_id})
            elif not (await tx.fetch(self.q.try_lock_owner_log, {"owner": owner_id})
                      )[0]["locked"]:
                return 0
            await tx.execute(self.q.owner_log_plan)
            rows = await tx.fetch(self.q.number_owner_log, {"owner": owner_id})
            return int(rows[0]["n"])

        return await self._write(op)

    async def number_owner_events(self) -> int:
        """The sweep's part: every owner's waiting events numbered, readers or not, so the
        rows without an id stay few. How many were numbered."""
        done = 0
        after = ""
        while True:
            async def owners(tx: Tx, after: str = after) -> list[str]:
                rows = await tx.fetch(self.q.pending_owner_logs,
                                      {"from_owner": after, "limit": _BATCH})
                return [r["owner_id"] for r in rows]

            batch = await self._read(owners)
            for owner in batch:
                done += await self._number_owner_log(owner, wait=False)
            if len(batch) < _BATCH:
                return done
            after = batch[-1]
