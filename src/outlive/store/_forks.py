"""Branches: a fork of a session, and the siblings of a fork family (docs/branches.md).

A fork is a new session whose logs start as a copy of its parent's prefix, seqs kept: its
events 1..seq, its history entries 1..n and the snapshots at or below seq, each copied by
one `INSERT … SELECT` inside the database, then a `forked` event. Keeping the seqs keeps
every pointer inside the copy valid (a user entry's message seq, a compacted answer's
`$entry`, a summary's `through`), so the fork's transcript is the parent's fold up to the
cut and its runs read the history as theirs. The parent is only read.
"""

from __future__ import annotations

from ..domain.branches import BranchPoint, ForkCut, ForkNode, branch_points, fork_cut
from ..domain.errors import InvalidInput, NotFound
from ..domain.events import Forked, SessionCreated
from ..domain.model import Delivery, Session, Status, new_id
from ._base import Row, Tx, TxState, to_entry, to_event, to_session
from ._sessions import SessionOps
from ._validation import check_client_request_id, check_text

__all__ = ["ForkOps"]

_KINDS = ("fork", "edit", "regenerate")


class ForkOps(SessionOps):
    async def fork_session(
        self, owner_id: str, session_id: str, *, at_seq: int | None = None,
        before_message: int | None = None, prompt: str | None = None, kind: str = "fork",
        client_request_id: str | None = None,
    ) -> Session:
        """A new session of the same owner, agent, model, metadata, budget, client tools and
        tool choice, whose logs are the session's up to the settled point at or before
        `at_seq` (or just before the user message `before_message`). Without `prompt` it is
        settled (`succeeded`), waiting for a message; with one, that is its first message
        and it is queued. A fork that would cut where the session's own fork copy ends cuts
        the session it was forked from instead, so siblings share one branch point."""
        for name, value in (("at_seq", at_seq), ("before_message", before_message)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
                raise InvalidInput(f"{name} must be an integer")
        if kind not in _KINDS:
            raise InvalidInput(f"kind must be one of {', '.join(_KINDS)}")
        if prompt is not None:
            check_text(prompt)
        check_client_request_id(client_request_id)
        sid = new_id("ses")

        async def op(tx: Tx, st: TxState) -> TxState:
            row = await self._owned(tx, owner_id, session_id)
            # A fork is a create: the owner's and end user's quotas hold for it too.
            await self._admit_create(tx, owner_id, prompt, row["end_user"])
            cut = await self._cut(tx, row, at_seq, before_message)
            wanted = at_seq if at_seq is not None else (before_message or 1) - 1
            source, seq = row, cut.seq
            while source["forked_from_id"] is not None and seq <= int(
                    source["forked_from_seq"]) + 1:  # at or before its `forked` marker
                copied = int(source["forked_from_seq"])
                try:  # the same prefix, copied: cut the session it came from
                    source = await self._owned(tx, owner_id, source["forked_from_id"])
                except NotFound:
                    break
                seq = min(seq, copied)
            if source is not row:
                cut = await self._cut(tx, source, seq, None)
            await self._fork_in(tx, st, source, sid, cut, wanted, kind)
            if prompt is not None:
                new = await self._locked(tx, sid, None)
                await self._post_locked(tx, st, new, prompt, Delivery.START, client_request_id)
            st.read_with_commit(self.q.get_session, {"id": sid})
            return st

        st = await self._write(op)
        return to_session(self.d, st.last_rows[0][0])

    async def _owned(self, tx: Tx, owner_id: str, session_id: str) -> Row:
        rows = await tx.fetch(self.q.get_owned_session, {"id": session_id, "owner": owner_id})
        if not rows:
            raise NotFound(f"session {session_id} not found")
        return rows[0]

    async def _cut(self, tx: Tx, row: Row, at_seq: int | None,
                   before_message: int | None) -> ForkCut:
        sid, last = row["id"], int(row["last_seq"])
        # The history first, then the log: a run of a live parent may commit between the
        # two reads (PostgreSQL reads each statement's newest commit), and the log read
        # second holds the event of every entry read first (its anchor is never missed).
        entries = [to_entry(self.d, r) for r in await tx.fetch(self.q.read_entries,
                                                               {"sid": sid})]
        events = [to_event(self.d, r) for r in await tx.fetch(
            self.q.read_landmarks, {"sid": sid, "upto": 2**62})]
        return fork_cut(events, entries, at_seq=at_seq, before_message=before_message,
                        last_seq=last)

    async def _fork_in(self, tx: Tx, st: TxState, row: Row, sid: str, cut: ForkCut,
                       wanted: int, kind: str) -> None:
        owner_id, parent = row["owner_id"], row["id"]
        await tx.execute(self.q.insert_session, {
            "id": sid, "owner": owner_id, "agent": row["agent"], "model": row["model"],
            "title": row["title"],
            "title_state": row["title_state"] if row["title"] else "pending",
            "metadata": self.d.json(self.d.load_json(row["metadata"]) or {}),
            "abandon": row["abandon_after"], "last": 0, "tp": None,
            "budget": None if row["budget"] is None else self.d.json(
                self.d.load_json(row["budget"])),
            "parent": None, "call_id": None, "root": None, "depth": 0, "detached": 0,
            "end_user": row["end_user"],  # a fork serves the person its parent served
            # Its history is a prefix of its parent's: the parent's bytes bound it (docs/quotas.md).
            "input_bytes": int(row["input_bytes"] or 0),
        })
        copy = {"new": sid, "sid": parent}
        await tx.execute(self.q.copy_fork_events, {**copy, "upto": cut.seq})
        await tx.execute(self.q.copy_fork_entries, {**copy, "upto": cut.entries})
        await tx.execute(self.q.copy_fork_snapshots, {**copy, "upto": cut.seq})

        def raw(column: str) -> object:
            value = self.d.load_json(row[column])
            return None if value is None else self.d.json(value)

        await tx.execute(self.q.settle_fork, {
            "new": sid, "sid": parent, "from_seq": cut.seq, "last_seq": cut.seq,
            "last_entry": cut.entries, "last_input": cut.last_input,
            "compacted": min(int(row["compacted_through"]), cut.seq),
            "root": row["fork_root_id"] or parent,
            "client_tools": raw("client_tools"), "choice": raw("tool_choice"),
        })
        marker = Forked(from_session_id=parent, from_seq=cut.seq,
                        requested_seq=wanted if wanted != cut.seq else None, kind=kind)
        await self._append(tx, sid, [marker.new()], fenced=None)
        await self._owner_event(tx, owner_id, sid, SessionCreated(
            status=Status.SUCCEEDED.value, attempt=0, title=row["title"]))
        st.notify(sid, owner_id, events=True, owner=True)

    async def list_branches(self, owner_id: str, session_id: str) -> list[BranchPoint]:
        """The branch points a page showing the session meets, each with its siblings."""

        async def op(tx: Tx) -> list[BranchPoint]:
            row = await self._owned(tx, owner_id, session_id)
            root = row["fork_root_id"] or row["id"]
            family = [ForkNode(r["id"], r["forked_from_id"], None if r["forked_from_seq"]
                               is None else int(r["forked_from_seq"]))
                      for r in await tx.fetch(self.q.fork_family,
                                              {"owner": owner_id, "root": root})]
            return branch_points(family, session_id)

        return await self._read(op)
