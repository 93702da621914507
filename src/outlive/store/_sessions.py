"""Sessions as owners see them: create, read, list, title, delete, cancel, follow-ups."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from ..domain.budget import Budget, parse_budget
from ..domain.client_tools import ClientTool, tools_to_json
from ..domain.errors import InvalidInput, NotFound, SessionBusy
from ..domain.events import (
    SessionCancelRequested,
    SessionCreated,
    SessionDeleted,
    SessionTitle,
    Title,
    UserMessage,
)
from ..domain.model import (
    TERMINAL,
    Delivery,
    NewEvent,
    Page,
    PostResult,
    Session,
    Status,
    new_id,
)
from ..domain.status import Action, transition
from ..domain.subagents import detached_message
from ..domain.tool_calls import ToolChoice
from ..domain.trace_context import valid_traceparent
from ._base import KeyTaken, Row, Tx, TxState, lifecycle, to_session
from ._children import ChildOps
from ._core import OwnerEvent
from ._lifecycle import aborts_run, status_event
from ._quotas import QuotaOps, text_bytes
from ._validation import (
    check_attention,
    check_client_request_id,
    check_end_user,
    check_list,
    check_session_args,
    check_text,
    check_title,
    parse_mode,
)

__all__ = ["SessionOps"]


class SessionOps(ChildOps, QuotaOps):
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
        client_request_id: str | None = None,
        traceparent: str | None = None,
        budget: Budget | dict[str, Any] | None = None,
        parent_id: str | None = None,
        client_tools: Sequence[ClientTool] | None = None,
        end_user: str | None = None,
        tool_choice: ToolChoice | None = None,
        child_limits: tuple[int, int] | None = None,
    ) -> Session:
        """With `client_request_id`, a create the owner already made with that id returns
        the first session (`replayed=True`) and writes nothing: a retried create never
        starts a second run. `parent_id`: a child of that session of the same owner
        (`NotFound` for any other), in its tree (docs/subagents.md); `child_limits`, the
        parent agent's (max depth, max children), are checked under the parent's lock
        (`LimitReached`). `end_user`: the application's id of the person it serves
        (docs/end-users.md); a child without one takes its parent's."""
        clean_title = check_session_args(agent, model, prompt, title, abandon_after, metadata)
        check_client_request_id(client_request_id)
        check_end_user(end_user)
        caps = parse_budget(budget)
        transition(None, Action.CREATE)
        sid = new_id("ses")

        async def op(tx: Tx, st: TxState) -> tuple[Session | None, TxState]:
            # A keyed create made before is answered here, counting against no quota. Two
            # running at once take turns at the admission (the owner's create window, locked
            # to the COMMIT); the second's key then collides with the first's committed one,
            # it rolls back whole (window bump included) and its next try answers from here.
            # No owner-row lock, and on PostgreSQL the admission goes out with the rest in
            # one flush: the window is held for no round trip of this process's.
            if client_request_id is not None:
                seen = await tx.fetch(self.q.find_create_request,
                                      {"owner": owner_id, "crid": client_request_id})
                if seen:
                    first = to_session(self.d, await self._locked(tx, seen[0]["session_id"],
                                                                  None))
                    return replace(first, replayed=True), st
            parent = (None if parent_id is None
                      else await self._parent_for_create(tx, owner_id, parent_id))
            if parent is not None and child_limits is not None:
                await self._check_child_limits(tx, parent, *child_limits)
            await self._admit_create(tx, owner_id, prompt, end_user)  # reads nothing after
            await self._create_in(
                tx, st, owner_id, sid, agent=agent, model=model, prompt=prompt,
                title=clean_title, metadata=metadata, abandon_after=abandon_after,
                client_request_id=client_request_id, traceparent=traceparent, budget=caps,
                parent_id=parent_id, parent=parent, end_user=end_user)
            if client_tools:
                await self._set_client_tools(tx, sid, client_tools)
            if tool_choice is not None and tool_choice.mode != "auto":
                await self._set_tool_choice(tx, sid, tool_choice)
            # The new row comes back with the COMMIT: on PostgreSQL everything from the
            # INSERT on goes out in one flush, so the session is queued (and workers told)
            # with no round trip after its `created_at`.
            st.read_with_commit(self.q.get_session, {"id": sid})
            return None, st

        for tries_left in reversed(range(3)):
            try:
                replayed, st = await self._write(op)
                break
            except KeyTaken:
                if client_request_id is None or not tries_left:
                    raise
        if replayed is not None:
            return replayed
        return to_session(self.d, st.last_rows[0][0])

    async def _create_in(
        self, tx: Tx, st: TxState, owner_id: str, sid: str, *, agent: str, model: str,
        prompt: str | None, title: str | None = None, metadata: dict[str, Any] | None = None,
        abandon_after: float | None = None, client_request_id: str | None = None,
        traceparent: str | None = None, budget: Budget | None = None,
        parent_id: str | None = None, parent: Row | None = None,
        end_user: str | None = None,
        owner_events: list[OwnerEvent] | None = None,
        first_events: list[tuple[str, int, int, int, NewEvent]] | None = None,
    ) -> None:
        """A checked create's writes inside a transaction of its caller (a create, or a
        schedule's fire, whose run row commits with the session it starts); with
        `owner_events` and `first_events`, its owner event and its prompt's event are left
        there for the caller to write later, many at once."""
        await tx.execute(
            self.q.insert_session,
            {
                "id": sid,
                "owner": owner_id,
                "agent": agent,
                "model": model,
                "title": title,
                "title_state": "manual" if title else "pending",
                "metadata": self.d.json(metadata or {}),
                "abandon": abandon_after,
                "last": 0 if prompt is None else 1,
                "tp": valid_traceparent(traceparent),
                "budget": None if budget is None else self.d.json(budget.to_dict()),
                "parent": parent_id, "call_id": None,
                "root": None if parent is None else parent["root_id"] or parent_id,
                "depth": 0 if parent is None else int(parent["depth"]) + 1, "detached": 0,
                "end_user": end_user if end_user is not None or parent is None
                else parent["end_user"],
                "input_bytes": text_bytes(prompt),
            },
        )
        if prompt is not None:  # seq 1, stamped after created_at; attempt and fence 0
            message = UserMessage(text=prompt, delivery=Delivery.START.value,
                                  client_request_id=client_request_id)
            if first_events is None:
                await self._insert_events_now(tx, [(sid, 1, 0, 0, message.new())])
            else:
                first_events.append((sid, 1, 0, 0, message.new()))
        if client_request_id is not None:
            await tx.execute(self.q.insert_create_request,
                             {"owner": owner_id, "crid": client_request_id, "sid": sid})
        created = SessionCreated(status=Status.QUEUED.value, attempt=0, title=title)
        if owner_events is None:
            await self._owner_event(tx, owner_id, sid, created)
        else:
            owner_events.append((owner_id, sid, created))
        st.notify(sid, owner_id, work=True, events=prompt is not None, owner=True)

    async def _set_client_tools(self, tx: Tx, sid: str, tools: Sequence[ClientTool]) -> None:
        await tx.execute(self.q.set_client_tools, {
            "id": sid, "client_tools": self.d.json(tools_to_json(tools)) if tools else None})

    async def _set_tool_choice(self, tx: Tx, sid: str, choice: ToolChoice) -> None:
        await tx.execute(self.q.set_tool_choice, {
            "id": sid, "choice": None if choice.mode == "auto" else self.d.json(
                {"mode": choice.mode, "name": choice.name})})

    async def set_tool_choice(self, owner_id: str, session_id: str,
                              choice: ToolChoice) -> None:
        """What the model must do with its tools on the first call of the session's next
        runs (`auto`: it decides), e.g. set with the results a run waits on."""

        async def op(tx: Tx, st: TxState) -> None:
            await self._locked(tx, session_id, owner_id)
            await self._set_tool_choice(tx, session_id, choice)

        await self._write(op)

    async def get_session(self, owner_id: str, session_id: str) -> Session:
        async def op(tx: Tx) -> Session:
            rows = await tx.fetch(self.q.get_owned_session, {"id": session_id, "owner": owner_id})
            if not rows:
                raise NotFound(f"session {session_id} not found")
            return to_session(self.d, rows[0])

        return await self._read(op)

    async def find_chat(self, owner_id: str, chat_id: str, *, end_user: str | None = None
                        ) -> Session | None:
        """The owner's newest live session whose metadata names `chat_id` as its `chat_id`
        (of those served for `end_user`, when given)."""
        check_end_user(end_user)

        async def op(tx: Tx) -> Session | None:
            rows = await tx.fetch(self.q.find_chat, {"owner": owner_id, "chat": chat_id,
                                                     "end_user": end_user})
            return to_session(self.d, rows[0]) if rows else None

        return await self._read(op)

    async def load_session(self, session_id: str) -> Session:
        async def op(tx: Tx) -> Session:
            rows = await tx.fetch(self.q.get_session, {"id": session_id})
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
        attention: str | None = None,
        parent_id: str | None = None,
        end_user: str | None = None,
    ) -> Page:
        """`end_user`: only the sessions served for that end user (docs/end-users.md)."""
        wanted = check_list(status, limit, cursor)
        check_attention(attention)
        check_end_user(end_user)

        async def op(tx: Tx) -> Page:
            rows = await tx.fetch(
                self.q.list_sessions,
                {
                    "owner": owner_id,
                    "status": wanted.value if wanted is not None else None,
                    "cursor": cursor,
                    "attention": attention,
                    "parent": parent_id,
                    "end_user": end_user,
                    "limit": limit + 1,
                },
            )
            items = [to_session(self.d, r) for r in rows[:limit]]
            more = len(rows) > limit
            return Page(items, items[-1].id if more and items else None)

        return await self._read(op)

    async def set_title(self, owner_id: str, session_id: str, title: str) -> Session:
        clean = check_title(title)

        async def op(tx: Tx, st: TxState) -> Session:
            row = await self._locked(tx, session_id, owner_id)
            await tx.execute(self.q.set_manual_title, {"t": clean, "id": session_id})
            await self._append(tx, session_id, [Title(title=clean).new()], fenced=None)
            await self._owner_event(tx, row["owner_id"], session_id, SessionTitle(title=clean))
            st.notify(session_id, owner_id, events=True, owner=True)
            return to_session(self.d, await self._locked(tx, session_id, None))

        return await self._write(op)

    async def delete_session(
        self, owner_id: str, session_id: str, *, purge_in: float | None = None
    ) -> None:
        """Hide the session (cancelling its run); with `purge_in`, its content is purged
        that many seconds later, once no run holds it (`purge_due`, `purge_session`)."""
        if purge_in is not None and purge_in < 0:
            raise InvalidInput("purge_in must be zero or more seconds")

        async def op(tx: Tx, st: TxState) -> None:
            await tx.fetch(self.q.lock_tree_below, {"id": session_id, "owner": owner_id})
            row = await self._locked(tx, session_id, owner_id)
            if purge_in is not None:
                await tx.execute(self.q.set_purge_after, {"grace": purge_in, "id": session_id})
            out = transition(lifecycle(row), Action.DELETE)
            extra: dict[str, Any] = (
                {} if row["status"] in TERMINAL else {"cancel_reason": "deleted"})
            await self._apply(tx, row, out.state, st=st, **extra)
            if out.cancelled_now:
                await self._end_events(tx, row, Status.CANCELLED, None, "deleted",
                                       dropped=await self._dropped_inputs(tx, row))
                await self._consume_inputs(tx, session_id)
                await self._cancel_approval(tx, row)
            await self._owner_event(tx, owner_id, session_id, SessionDeleted())
            await self._delete_tree(tx, st, session_id, purge_in)
            st.notify(session_id, owner_id, work=True, events=out.cancelled_now, owner=True,
                      cancel=aborts_run(row, out.state))

        await self._write(op)

    async def request_cancel(
        self, owner_id: str, session_id: str, *, reason: str = "user"
    ) -> Session:
        async def op(tx: Tx, st: TxState) -> str:
            await tx.fetch(self.q.lock_tree_below, {"id": session_id, "owner": owner_id})
            row = await self._locked(tx, session_id, owner_id)
            out = transition(lifecycle(row), Action.REQUEST_CANCEL)
            if out.changed:
                await self._apply(tx, row, out.state, st=st, cancel_reason=reason)
                await self._owner_event(tx, owner_id, session_id,
                                        SessionCancelRequested(reason=reason))
                if out.cancelled_now:
                    await self._end_events(tx, row, Status.CANCELLED, None, reason,
                                           dropped=await self._dropped_inputs(tx, row))
                    await self._consume_inputs(tx, session_id)
                    await self._cancel_approval(tx, row)
                st.notify(session_id, owner_id, work=True, events=out.cancelled_now, owner=True,
                          cancel=aborts_run(row, out.state))
                await self._cancel_tree(tx, st, session_id)
            return session_id

        return await self._write_session(op)

    async def request_compaction(self, owner_id: str, session_id: str) -> Session:
        """A live session keeps running with the flag set (its worker hears the notice); a
        settled one is queued again as a follow-up message would queue it, for a claim whose
        reason is `compact`. The first request's time is kept: asking twice is one request."""
        async def op(tx: Tx, st: TxState) -> str:
            row = await self._locked(tx, session_id, owner_id)
            state = lifecycle(row)
            out = transition(state, Action.REQUEST_COMPACT)
            if not out.changed:
                return session_id
            await tx.execute(self.q.request_compaction, {"id": session_id})
            requeued = state.status in TERMINAL
            if requeued:
                await self._apply(tx, row, out.state, error_code=None, error_message=None)
                # The person is there now: the abandon clock starts afresh, as for a message.
                await tx.execute(self.q.touch_watched, {"ids": self.d.ids([session_id])})
                await self._owner_event(tx, owner_id, session_id,
                                        status_event(Status.QUEUED, 0))
            st.notify(session_id, owner_id, work=True, owner=requeued)
            return session_id

        return await self._write_session(op)

    async def post_message(
        self,
        owner_id: str,
        session_id: str,
        text: str,
        *,
        mode: Delivery | str = Delivery.STEER,
        client_request_id: str | None = None,
        traceparent: str | None = None,
        client_tools: Sequence[ClientTool] | None = None,
        tool_choice: ToolChoice | None = None,
    ) -> PostResult:
        """`client_tools` (not None): the client tools of the session's runs from this
        message on (an empty list: none any more); `tool_choice` (not None) likewise."""
        check_text(text)
        tp = valid_traceparent(traceparent)
        wanted = parse_mode(mode)
        check_client_request_id(client_request_id)

        async def op(tx: Tx, st: TxState) -> PostResult:
            row = await self._locked(tx, session_id, owner_id)
            await self._admit_message(tx, row, text, lifecycle(row).status in TERMINAL)
            if client_tools is not None:
                await self._set_client_tools(tx, session_id, client_tools)
            if tool_choice is not None:
                await self._set_tool_choice(tx, session_id, tool_choice)
            return await self._post_locked(tx, st, row, text, wanted, client_request_id, tp)

        return await self._write(op)

    async def _post_locked(
        self, tx: Tx, st: TxState, row: Row, text: str, wanted: Delivery,
        client_request_id: str | None = None, tp: str | None = None, *,
        owner_events: list[OwnerEvent] | None = None,
    ) -> PostResult:
        """A user message to the session of `row` (locked by this transaction), as
        `post_message` writes it: also a detached child's report (`post_reports`), a
        scheduled message and a schedule's fire (whose own rows go in the same transaction;
        with `owner_events`, its owner event is left there for the caller to write last)."""
        session_id, owner_id = row["id"], row["owner_id"]
        if client_request_id is not None:
            seen = await tx.fetch(self.q.find_message_request,
                                  {"sid": session_id, "crid": client_request_id})
            if seen:
                return PostResult(int(seen[0]["seq"]), Delivery(seen[0]["delivery"]),
                                  bool(seen[0]["requeued"]))
        state = lifecycle(row)
        in_flight = state.status is Status.RUNNING and not state.cancel_requested
        if wanted is Delivery.REJECT and in_flight:
            raise SessionBusy(
                "a run is in flight; retry later or send with mode steer, queue or interrupt"
            )
        delivery = wanted if in_flight and wanted is not Delivery.REJECT else Delivery.START
        out = transition(state, Action.POST_MESSAGE)
        requeued = state.status in TERMINAL
        message = UserMessage(text=text, delivery=delivery.value,
                              client_request_id=client_request_id)
        if requeued:
            await self._apply(tx, row, out.state, error_code=None, error_message=None)
        elif out.changed:
            await self._apply(tx, row, out.state)
        if tp is not None or (requeued and row["traceparent"] is not None):
            # The next run joins the request's trace; a revival without one starts its own.
            await tx.execute(self.q.set_traceparent, {"tp": tp, "id": session_id})
        ev = await self._append(tx, session_id, [message.new()], fenced=None)
        seq = ev[0].seq
        await tx.execute(self.q.set_last_input_seq,
                         {"seq": seq, "id": session_id, "bytes": text_bytes(text)})
        # A person who writes is watching: the abandon clock starts from here, so a
        # session revived long after its last stream is not abandoned on the spot.
        await tx.execute(self.q.touch_watched, {"ids": self.d.ids([session_id])})
        if requeued and owner_events is not None:
            owner_events.append((owner_id, session_id, status_event(Status.QUEUED, 0)))
        elif requeued:
            await self._owner_event(tx, owner_id, session_id,
                                    status_event(Status.QUEUED, 0))
        if client_request_id is not None:
            await tx.execute(
                self.q.insert_message_request,
                {"sid": session_id, "crid": client_request_id, "seq": seq,
                 "delivery": delivery.value, "requeued": requeued},
            )
        st.notify(session_id, owner_id, work=True, events=True, owner=requeued)
        return PostResult(seq, delivery, requeued)

    async def post_reports(self, *, limit: int = 50) -> int:
        """One batch: each detached child's report not yet posted goes to its parent as a
        message (`queue`: after the answer in flight; a parent that succeeded or failed is
        queued again, a cancelled or deleted one is left alone), marked posted in the same
        transaction, so it is posted once."""

        async def op(tx: Tx, st: TxState) -> int:
            due = await tx.fetch(self.q.reports_due, {"limit": limit})
            for child in due:
                await tx.execute(self.q.set_report_posted, {"id": child["id"]})
                try:
                    parent = await self._locked(tx, child["parent_id"], None)
                except NotFound:  # purged: nobody to tell
                    continue
                if parent["deleted_at"] is not None or parent["status"] == Status.CANCELLED:
                    continue  # a cancelled parent is not started again by its child's end
                report = self.d.load_json(child["parent_report"])
                text = detached_message(child["id"], child["agent"], child["parent_call_id"],
                                        report, await self._report_text(tx, child["id"], report))
                await self._post_locked(tx, st, parent, text, Delivery.QUEUE,
                                        f"child:{child['id']}", None)
            return len(due)

        return await self._write(op)

    async def touch_watched(self, session_ids: Sequence[str]) -> None:
        """The API's periodic bump: a row another transaction holds is left for the next
        round (`touch_watched_batch`), so this never waits in a lock cycle."""
        if not session_ids:
            return

        async def op(tx: Tx, st: TxState) -> None:
            await tx.execute(self.q.touch_watched_batch,
                             {"ids": self.d.ids(list(session_ids))})

        await self._write(op)

    async def count_by_status(self) -> dict[str, int]:
        """Sessions by status over the whole database (for metrics; not owner-scoped)."""

        async def op(tx: Tx) -> dict[str, int]:
            rows = await tx.fetch(self.q.count_by_status)
            counts = {s.value: 0 for s in Status}
            counts.update({r["status"]: int(r["n"]) for r in rows})
            return counts

        return await self._read(op)

    async def ping(self) -> None:
        """Raises if the database cannot be reached (health checks)."""

        async def op(tx: Tx) -> None:
            await tx.fetch(self.q.ping)

        await self._read(op)
