"""Bounded storage: deleted and expired sessions purged, finished ones compacted, the owner
log kept to its last events (docs/retention.md).

Every method does one bounded batch in short transactions and says how much it did, so a
sweep calls it until it returns 0 and live work never waits long behind it. On PostgreSQL
the batches skip rows another transaction holds (`SKIP LOCKED`); on SQLite each batch is one
short write transaction, after which the freed pages are given back to the file system.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..domain.events import MessageEnd, parse
from ..domain.model import TERMINAL, Status
from ..domain.reducer import REDUCER_VERSION, empty_state, fold
from ._base import TEXT_REF, Row, Tx, TxState
from ._core import StoreCore

__all__ = ["COMPACTED_TYPES", "TEXT_DELTAS", "RetentionOps"]

TEXT_DELTAS = frozenset({"text_delta", "thinking_delta"})
"""What every compaction deletes (`message_end` carries the text they streamed)."""
COMPACTED_TYPES = TEXT_DELTAS | {"tool_progress"}
"""What a compaction that stores a snapshot deletes: what they said is in the snapshot."""

_EVENT_BUDGET = 20_000
"""A purge batch stops adding sessions once it holds this many events (at least one)."""
_FOLD_PAGE = 1000
_ROW_BYTES = 150
"""About what an event row costs beyond its data (columns, row header, primary-key entry)."""


def _size(value: Any) -> int:
    return len(json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode())


def _within_budget(rows: Sequence[Row]) -> list[str]:
    ids: list[str] = []
    total = 0
    for row in rows:
        if ids and total + int(row["last_seq"]) > _EVENT_BUDGET:
            break
        ids.append(row["id"])
        total += int(row["last_seq"])
    return ids


@dataclass(frozen=True)
class _Plan:
    last: int
    """The seq compacted through (the session's last)."""
    since: int
    """The previous `compacted_through`: deltas at or below it are gone already."""
    base: int
    """Seq of the snapshot the fold started from (0: none); a snapshot-less compaction keeps
    it and drops the cached ones above it, which would be folded across the new gaps."""
    snapshot: dict[str, Any] | None
    """The transcript at `last` (answers as pointers at their entries) when the remaining
    events alone would not give it back, or when it is smaller than the `tool_progress`
    events it replaces."""


class RetentionOps(StoreCore):
    async def _reclaim(self) -> None:
        """Give freed pages back after a purge or compaction (SQLite); nothing to do on
        PostgreSQL, whose autovacuum reuses them."""

    async def _purge_ids(self, tx: Tx, ids: list[str]) -> None:
        params = {"ids": self.d.ids(ids)}
        for query in (self.q.purge_events, self.q.purge_entries, self.q.purge_snapshots,
                      self.q.purge_message_requests, self.q.purge_create_requests,
                      self.q.purge_approvals, self.q.purge_scheduled_messages,
                      self.q.purge_owner_events, self.q.purge_webhook_deliveries,
                      self.q.purge_sessions):
            await tx.execute(query, params)

    async def purge_due(self, *, limit: int = 50) -> int:
        """One batch of deleted sessions whose grace is over (never one a run still holds)."""

        async def op(tx: Tx, st: TxState) -> int:
            ids = _within_budget(await tx.fetch(self.q.due_purges, {"limit": limit}))
            if ids:
                await self._purge_ids(tx, ids)
            return len(ids)

        done = await self._write(op)
        if done:
            await self._reclaim()
        return done

    async def purge_session(self, session_id: str) -> bool:
        """Purge one deleted session now if its grace is over and no run holds it."""

        async def op(tx: Tx, st: TxState) -> bool:
            if not await tx.fetch(self.q.due_purge_of, {"id": session_id}):
                return False
            await self._purge_ids(tx, [session_id])
            return True

        done = await self._write(op)
        if done:
            await self._reclaim()
        return done

    async def _retention_window(self, tx: Tx, older_than: float | None
                                ) -> dict[str, float] | None:
        """The parameters of the expiry queries: the server's retention (-1: forever) and
        the shortest one in force; None when every session is kept forever."""
        rows = await tx.fetch(self.q.shortest_retention)
        owned = rows[0]["secs"] if rows else None
        shortest = [float(x) for x in (older_than, owned) if x is not None]
        if not shortest:
            return None
        return {"age": -1.0 if older_than is None else float(older_than),
                "floor": min(shortest)}

    async def purge_expired(self, *, older_than: float | None, limit: int = 50) -> int:
        """One batch of sessions that ended longer ago than their owner's retention, or,
        for owners without one, `older_than` seconds (None: kept forever), removed whole."""

        async def op(tx: Tx, st: TxState) -> int:
            window = await self._retention_window(tx, older_than)
            if window is None:
                return 0
            rows = await tx.fetch(self.q.expired_sessions, {**window, "limit": limit})
            ids = _within_budget(rows)
            if ids:
                await self._purge_ids(tx, ids)
            return len(ids)

        done = await self._write(op)
        if done:
            await self._reclaim()
        return done

    async def count_expired(self, *, older_than: float | None) -> int:
        async def op(tx: Tx) -> int:
            window = await self._retention_window(tx, older_than)
            if window is None:
                return 0
            rows = await tx.fetch(self.q.count_expired, window)
            return int(rows[0]["n"])

        return await self._read(op)

    # -- compaction ------------------------------------------------------------------------

    async def compact_finished(self, *, older_than: float, limit: int = 20) -> int:
        """Compact up to `limit` sessions that ended more than `older_than` seconds ago
        (`ended_at`, written with the status, so a turn's updates never touch its index)."""

        async def pick(tx: Tx) -> list[str]:
            rows = await tx.fetch(self.q.compactable_sessions,
                                  {"age": older_than, "limit": limit})
            return [r["id"] for r in rows]

        done = 0
        for sid in await self._read(pick):
            done += await self.compact_session(sid)
        if done:
            await self._reclaim()
        return done

    async def compact_session(self, session_id: str) -> bool:
        """Delete a finished session's deltas up to its last seq and mark that seq as
        `compacted_through`; seqs are never renumbered. When the remaining events fold to
        the same transcript (every message ended with its authoritative text, no thinking)
        and keeping the `tool_progress` events costs less than a snapshot, only the text and
        thinking deltas go; otherwise the transcript is stored as a snapshot at that seq and
        `tool_progress` goes too. Either way each `message_end` whose text its assistant
        entry repeats then points at the entry. False (and nothing changed) when the session
        is running or grew since it was read."""
        plan = await self._plan_compaction(session_id)
        if plan is None:
            return False

        async def op(tx: Tx, st: TxState) -> bool:
            row = await self._locked(tx, session_id, None)
            if Status(row["status"]) not in TERMINAL or int(row["last_seq"]) != plan.last:
                return False
            if plan.snapshot is None:
                await tx.execute(self.q.drop_snapshots_above,
                                 {"sid": session_id, "seq": plan.base})
                await tx.execute(self.q.drop_text_deltas,
                                 {"sid": session_id, "from": plan.since, "upto": plan.last})
            else:
                await tx.execute(self.q.put_snapshot, {"sid": session_id, "seq": plan.last,
                                                       "state": self.d.json(plan.snapshot)})
                await tx.execute(self.q.drop_older_snapshots,
                                 {"sid": session_id, "seq": plan.last})
                await tx.execute(self.q.drop_deltas,
                                 {"sid": session_id, "from": plan.since, "upto": plan.last})
            await self._point_texts_at_entries(tx, session_id, plan.since, plan.last)
            await tx.execute(self.q.set_compacted_through, {"seq": plan.last, "id": session_id})
            return True

        return await self._write(op)

    async def _point_texts_at_entries(self, tx: Tx, session_id: str, since: int,
                                      last: int) -> None:
        """Each answer's text is in its assistant entry (the model's history, kept for a
        follow-up) and again in its `message_end`: keep one copy. A `message_end` whose text
        equals its entry's points at the entry instead; reads give the text back."""
        ends = await tx.fetch(self.q.compactable_message_ends,
                              {"sid": session_id, "from": since, "upto": last})
        if not ends:
            return
        answers = await self._answers(tx, session_id)
        for row in ends:
            data = self.d.load_json(row["data"])
            end = parse("message_end", data)
            if not isinstance(end, MessageEnd) or not end.text or end.message_id is None:
                continue
            seq = answers.get((end.message_id, end.text))
            if seq is not None:
                await tx.execute(self.q.set_event_data, {
                    "sid": session_id, "seq": int(row["seq"]),
                    "data": self.d.json({**data, "text": {TEXT_REF: seq}})})

    async def _plan_compaction(self, session_id: str) -> _Plan | None:
        """Fold the log from the last exact base (the snapshot at or below the previous
        compaction's seq, else nothing) twice, with and without the text and thinking
        deltas, in one consistent read; None if there is nothing to compact. A snapshot
        is planned when the log left would not give the transcript back, or when it takes
        less room than the `tool_progress` events it lets go (a row each)."""

        async def op(tx: Tx) -> _Plan | None:
            rows = await tx.fetch(self.q.get_session, {"id": session_id})
            if not rows:
                return None
            row = rows[0]
            last, since = int(row["last_seq"]), int(row["compacted_through"])
            if Status(row["status"]) not in TERMINAL or since >= last:
                return None
            full: dict[str, Any] = empty_state()
            base = 0
            if since > 0:
                stored = await tx.fetch(self.q.load_snapshot,
                                        {"sid": session_id, "at_most": since})
                state = await self._snapshot_state(
                    tx, session_id, self.d.load_json(stored[0]["state"])) if stored else None
                if isinstance(state, dict) and state.get("version") == REDUCER_VERSION:
                    full, base = state, int(stored[0]["seq"])
            light, reached, progress = full, base, 0
            while reached < last:
                batch = await self._events(tx, session_id, await tx.fetch(
                    self.q.read_events,
                    {"sid": session_id, "after": reached, "limit": _FOLD_PAGE}))
                if not batch:
                    break
                full = fold(batch, full)
                light = fold([e for e in batch if e.type not in TEXT_DELTAS], light)
                progress += sum(_ROW_BYTES + _size(e.data) for e in batch
                                if e.type == "tool_progress" and e.seq > since)
                reached = batch[-1].seq
            if light == full and not progress:
                return _Plan(last, since, base, None)
            compact = await self._texts_as_pointers(tx, session_id, full)
            if light == full and _size(compact) + _ROW_BYTES >= progress:
                return _Plan(last, since, base, None)
            return _Plan(last, since, base, compact)

        return await self._read(op)

    async def _texts_as_pointers(self, tx: Tx, session_id: str,
                                 state: dict[str, Any]) -> dict[str, Any]:
        """The transcript to store: each answer whose text its assistant entry holds points
        at the entry (`{"$entry": seq}`); loading the snapshot gives the text back."""
        answers = await self._answers(tx, session_id)
        items = [
            {**item, "text": {TEXT_REF: answers[(item.get("message_id"), item["text"])]}}
            if item.get("kind") == "assistant" and isinstance(item.get("text"), str)
            and item["text"] and isinstance(item.get("message_id"), str)
            and (item.get("message_id"), item["text"]) in answers
            else item
            for item in state.get("items", [])]
        return {**state, "items": items}

    async def _answers(self, tx: Tx, session_id: str) -> dict[tuple[str, str], int]:
        """(message id, text) -> the seq of the assistant entry holding that answer."""
        answers: dict[tuple[Any, str], int] = {}
        for row in await tx.fetch(self.q.assistant_entries, {"sid": session_id}):
            entry = self.d.load_json(row["data"])
            if (isinstance(entry, dict) and isinstance(entry.get("text"), str)
                    and isinstance(entry.get("message_id"), str)):
                answers.setdefault((entry.get("message_id"), entry["text"]), int(row["seq"]))
        return answers

    # -- the owner log ---------------------------------------------------------------------

    async def trim_owner_events(self, *, keep: int, limit: int = 5000) -> int:
        """Delete each owner's events older than its last `keep`, at most `limit` per owner
        per call (a reader that far behind is told to resync anyway)."""

        async def heads(tx: Tx) -> list[Row]:
            return await tx.fetch(self.q.owner_log_heads, {"keep": keep})

        removed = 0
        for head in await self._read(heads):
            owner, last = head["id"], int(head["last_event_id"])

            async def op(tx: Tx, st: TxState, owner: str = owner, last: int = last) -> int:
                rows = await tx.fetch(self.q.oldest_owner_event, {"owner": owner})
                oldest = rows[0]["id"] if rows else None
                if oldest is None or int(oldest) > last - keep:
                    return 0
                upto = min(last - keep, int(oldest) + limit - 1)
                await tx.execute(self.q.trim_owner_events, {"owner": owner, "upto": upto})
                return upto - int(oldest) + 1

            removed += await self._write(op)
        return removed
