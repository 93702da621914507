"""One run: from a claim to a settle or a park (docs/architecture.md §5).

The run decides; its collaborators act. Every write goes through the run's write-behind
buffer (`writes.RunWrites`), which names the lease, so a run that lost its lease can change
nothing. The model call (`model_call.ModelCaller`) and each tool (`tool_call.ToolRunner`) run
as activities under a `activity.Supervisor`, which a cancel or an interrupt aborts at once
while the run stays alive to write the partial answer, the interrupted receipts and the
settle. `inputs.Inbox` knows which user messages wait and when to read the session again.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
from collections.abc import Sequence

from .. import metrics, tracing
from ..domain.approvals import ApprovalRequest
from ..domain.errors import LeaseLost, PendingInput, StoreUnavailable
from ..domain.events import (
    Incomplete,
    MessageEnd,
    SessionResumed,
    SessionStart,
    TurnStart,
    Usage,
    UserMessage,
    UserQuestion,
)
from ..domain.model import (
    TRUNCATION_KEY,
    Claim,
    ClaimReason,
    Delivery,
    ErrorInfo,
    Event,
    Lease,
    Status,
    TitleState,
    new_id,
)
from ..domain.resume import plan_resume
from ..providers import ContextLimits, ModelProvider, ToolCall
from ..store import RunnerStore
from ..tools import ToolResult
from .activity import Abort, Supervisor
from .agents import Agent
from .approval_gate import ApprovalGate, Verdict, denial
from .child_progress import ProgressRelay
from .client_tools import ClientTools
from .context import Compactor, SummarizerResolver
from .history import assistant_entry, tool_result_entry, user_entry
from .inputs import Inbox, delivery, to_deliver
from .model_call import ModelCaller
from .owner_budgets import OwnerBudgets
from .question_wait import trace_question_wait
from .settings import RuntimeSettings
from .subagents import Delegator
from .tool_call import ToolRunner, never_started
from .tree_budgets import TreeBudgets
from .usage import CallMeter, PriceResolver
from .waits import wait_ended
from .writes import LeaseState, LeaseWrites, RunWrites, Stopped

__all__ = ["Run"]

log = logging.getLogger("outlive.runtime")

ASK_TOOL = "ask_user"
_TAKEOVERS = (ClaimReason.CRASH, ClaimReason.HANDOFF)


class _Check(enum.Enum):
    """The check a notice starts (one at a time)."""

    IDLE = "idle"
    RUNNING = "running"
    AGAIN = "again"
    """A notice came during the check: check once more when it ends."""


class Run:
    """Runs one claimed session. `task` is the asyncio task the worker awaits."""

    def __init__(
        self,
        store: RunnerStore,
        claim: Claim,
        agent: Agent,
        provider: ModelProvider,
        model_name: str,
        settings: RuntimeSettings,
        sink: LeaseWrites | None = None,
        *,
        notices_complete: bool = False,
        limits: ContextLimits | None = None,
        summarizers: SummarizerResolver | None = None,
        prices: PriceResolver | None = None,
        owner_budgets: OwnerBudgets | None = None,
        tree_budgets: TreeBudgets | None = None,
    ) -> None:
        """`sink`: where the run's fenced writes go (the worker's group committer), else
        straight to the store. `notices_complete`: every notice for the session reaches the
        run (`Subscription.complete`), so its inbox is read again only after one. `prices`:
        each route's price, for the cost of each call in the usage ledger. `owner_budgets`,
        `tree_budgets`: the worker's admission of calls against owners' monthly budgets
        and sub-agent trees' (their roots')."""
        assert claim.lease is not None
        self.store = store
        self.claim = claim
        self.session = claim.session
        self.lease: Lease = claim.lease
        self.agent = agent
        self.settings = settings
        self.task: asyncio.Task[None] | None = None
        self.writes = RunWrites(sink or store, self.lease)
        self.activity = Supervisor(self.writes, settings.flush_interval)
        self.inbox = Inbox(store, claim.session, settings.backstop_interval, claim.inputs,
                           notices_complete=notices_complete)
        self.compactor = Compactor(
            self.session_id, agent, provider, model_name, claim.session.model,
            limits or ContextLimits(), settings, self.writes, self.activity, summarizers,
            enabled=(claim.session.metadata or {}).get(TRUNCATION_KEY) != "disabled")
        meter = CallMeter(claim.session.model, claim.session.attempt, prices)
        self.compactor.meter = meter
        self.model_caller = ModelCaller(self.session_id, agent, provider, model_name,
                                        settings, self.writes, self.activity, self.compactor,
                                        meter, budget=claim.session.budget or agent.budget,
                                        used=claim.session.usage,
                                        used_through=claim.session.last_entry_seq,
                                        owner_budgets=owner_budgets,
                                        owner_id=claim.session.owner_id,
                                        tree_budgets=tree_budgets,
                                        root_id=claim.session.root_id)
        # A child tells its waiting parent what its tools do (docs/subagents.md).
        self.relay = ProgressRelay(store, self.lease, agent.name,
                                   active=claim.session.parent_call_id is not None)
        self.tool_runner = ToolRunner(self.session_id, agent.tools, self.writes, self.activity,
                                      self.relay.tell if self.relay.active else None)
        self.gate = ApprovalGate(store, self.session_id, agent.tools, self.lease.fence)
        self.delegator = Delegator(store, claim.session, agent, self.writes)
        self.clients = ClientTools(store, claim.session, agent.tools, self.writes)
        self.model_caller.client_tools = self.clients.specs
        self.model_caller.tool_choice = claim.session.tool_choice
        self._check = _Check.IDLE
        self._checker: asyncio.Task[None] | None = None
        self._asked = False  # the last answer asked a question: a settle waits on the answer
        self._title_pending = claim.session.title_state is TitleState.PENDING
        """The automatic title is still to be set (from the first message delivered); a
        flag of the run's own rather than a copy of the whole session when it is set."""
        self.log = logging.LoggerAdapter(
            log, {"session_id": self.lease.session_id, "worker": self.lease.worker,
                  "fence": self.lease.fence, "attempt": claim.session.attempt},
        )

    @property
    def session_id(self) -> str:
        return self.lease.session_id

    # -- signals from the worker ---------------------------------------------------------

    def poke(self) -> None:
        """A notification for this session: look for a cancel request or an interrupt."""
        self.inbox.stale()
        if self._check is not _Check.IDLE:
            self._check = _Check.AGAIN
            return
        self._check = _Check.RUNNING
        # Held here: the event loop keeps only a weak reference to a task.
        self._checker = asyncio.get_running_loop().create_task(self._check_session())

    async def _check_session(self) -> None:
        try:
            while True:
                self._check = _Check.RUNNING
                session = await self.store.load_session(self.session_id)
                if session.fence != self.lease.fence or session.lease_worker != self.lease.worker:
                    self.lost()
                    return
                if session.compact_requested:
                    self.compactor.requested = True
                if session.cancel_requested:
                    self.cancel_seen()
                elif self.activity.running:
                    inputs = await self.store.undelivered_inputs(self.session_id)
                    if any(delivery(e) == Delivery.INTERRUPT for e in inputs):
                        self.activity.abort(Abort.INTERRUPT)
                if self._check is _Check.RUNNING:
                    return
        except Exception as exc:  # the backstop (heartbeat, safe points) still catches it
            self.log.warning("check of %s failed: %s", self.session_id, exc)
        finally:
            self._check = _Check.IDLE

    def cancel_seen(self) -> None:
        self.activity.cancel()

    def lost(self) -> None:
        """The lease is gone: stop at once and write nothing more. A parking run is handing
        its lease over already: the notice of its own park, or the peer's claim, seen before
        the park returns is no loss, and cancelling would cut the park's wait short (the
        process could then close the store under it)."""
        if self.writes.state is LeaseState.PARKING:
            return
        if self.writes.lose():
            metrics.LEASE_LOSSES.inc()
            self.log.warning("lease lost on %s (fence %d); stopping", self.session_id,
                             self.lease.fence)
            if self.task is not None:
                self.task.cancel()

    def park(self) -> None:
        """Shutdown: stop and hand the session to another worker without settling it."""
        if self.writes.start_parking() and self.task is not None:
            self.task.cancel()

    # -- top level -------------------------------------------------------------------------

    async def main(self) -> None:
        try:
            # One trace per run, continued by a takeover (docs/tracing.md); a no-op when off.
            with tracing.run_span(self.agent.name, self.session, self.claim.reason.value,
                                  takeover=self.claim.reason in _TAKEOVERS,
                                  normal=(Stopped,)) as span:
                if span.traceparent is not None:
                    await self.store.set_run_trace(self.lease, span.traceparent)
                try:
                    await self._run()
                finally:
                    if span.recording and self.writes.ended is not None:
                        status, error = self.writes.ended
                        span.set("outlive.status", status.value)
                        if error is not None:
                            span.failed(error.code, error.message)
        except Stopped:
            pass
        except LeaseLost:
            self.writes.lose()
            self.log.warning("lease lost on %s; the run wrote nothing more", self.session_id)
        except StoreUnavailable as exc:
            # Whether the last write committed is unknown: stop without settling and let the
            # lease lapse, so the next claim resumes from what the database really holds.
            self.writes.lose()
            self.log.warning("database unavailable (%s); leaving %s to be resumed", exc,
                             self.session_id)
        except asyncio.CancelledError:
            if self.writes.state is LeaseState.LOST:
                return
            if self.writes.state is LeaseState.PARKING:
                await self.writes.park()
                return
            raise
        except Exception as exc:
            self.log.exception("run of %s failed", self.session_id)
            with contextlib.suppress(LeaseLost):
                await self.writes.settle(
                    Status.FAILED, ErrorInfo("internal_error", f"{type(exc).__name__}: {exc}")
                )
        finally:
            await self.relay.close()
            await self.activity.stop()

    async def _run(self) -> None:
        if self.session.last_entry_seq > 0:
            self.writes.history = await self.store.read_entries(self.session_id)
        plan = plan_resume(self.writes.history)
        reason = self.claim.reason
        attempt = self.session.attempt
        dangling = [ToolCall(c.call_id, c.name, dict(c.arguments)) for c in plan.dangling]
        if reason in (ClaimReason.CRASH, ClaimReason.HANDOFF):
            # The first claim after a wait ended continues the run that waited (`waits`).
            why = await wait_ended(self.gate, self.delegator, self.clients, reason, dangling)
            self.writes.hold(events=[SessionResumed(
                reason=why or reason.value, attempt=attempt,
                repaired_tool_calls=[] if why else [c.call_id for c in dangling]).new()])
        elif not self.claim.started:  # else the claim wrote it: durable already
            self.writes.hold(events=[SessionStart(reason=reason.value, attempt=attempt).new()])
        if dangling:
            self.inbox.claim_outdated()  # repairs take time; read the session after them
            await self._resume_calls(dangling)
        self._asked = plan.awaiting_user
        if plan.awaiting_user and reason is ClaimReason.FOLLOW_UP:
            await trace_question_wait(self.store, self.session_id, self.claim.inputs)
        if reason is ClaimReason.COMPACT or self.session.compact_requested:
            # Asked for (`POST …/compact`): compact now, then carry on as the session was.
            self.compactor.requested = True
            await self.writes.commit()  # the held start, before the summarizer runs
            await self.model_caller.compact_now()
        await self._loop(final=plan.complete or plan.awaiting_user)

    async def _repair(self, tc: ToolCall) -> None:
        """A dangling call a crash may have started: idempotent tools run again with their
        key, others are reported interrupted."""
        if self.agent.tools.is_idempotent(tc.name):
            metrics.REPAIRS.labels("rerun").inc()
            entry, event, _ = await self.tool_runner.run(tc, rerun=True)
            self.writes.hold([entry], [event])
        else:
            metrics.REPAIRS.labels("interrupted").inc()
            result = ToolResult.failure("interrupted", 0, interrupted=True)
            self.writes.hold(
                [tool_result_entry(tc.call_id, tc.name, result)],
                [result.ended(tc.call_id).new()],
            )

    async def _resume_calls(self, calls: Sequence[ToolCall]) -> None:
        """The dangling calls of the last answer, in order: see `ApprovalGate.rule`; the
        delegation calls' are their children's (`Delegator.resume`)."""
        calls = await self.delegator.resume(await self.clients.resume(calls))
        fresh = await self.gate.fresh(calls)
        for i, tc in enumerate(calls):
            ruling = await self.gate.rule(tc, fresh=fresh)
            if ruling.verdict is Verdict.CANCEL:
                # As a cancel mid-tool settles it: the model learns the call did not run.
                entry, event = denial(tc, ruling.reason)
                self.writes.hold([entry, *never_started(list(calls[i + 1 :])),
                                  *self.delegator.dropped(), *self.clients.dropped()], [event])
                return
            if ruling.verdict is Verdict.ASK:
                await self._await_approval(tc)
            elif ruling.verdict is Verdict.DENY:
                entry, event = denial(tc, ruling.reason)
                self.writes.hold([entry], [event])
            elif ruling.verdict is Verdict.REPAIR:
                await self._repair(tc)
            else:
                entry, event, _ = await self.tool_runner.run(tc)
                self.writes.hold([entry], [event])
        await self.delegator.wait()
        await self.clients.wait()

    async def _await_approval(self, call: ToolCall) -> None:
        """Stop before `call` until a person decides; the worker slot is free meanwhile."""
        await self.writes.await_approval(ApprovalRequest(new_id("apv"), call.call_id, call.name,
                                                         dict(call.arguments),
                                                         self.settings.approval_ttl))

    def _title_from(self, deliver: Sequence[Event]) -> str | None:
        """The automatic title, from the first message the run delivers, set once."""
        if not self._title_pending or not deliver:
            return None
        first = deliver[0].payload
        text = " ".join(first.text.split()) if isinstance(first, UserMessage) else ""
        if not text:
            return None
        return text if len(text) <= 60 else text[:57].rstrip() + "…"

    async def _read_inputs(self) -> list[Event]:
        """The undelivered user messages; a session read, when due, also finds a lost lease
        or a cancel request."""
        if not self.inbox.due():
            return self.inbox.waiting()
        fresh = await self.inbox.session()
        if fresh.fence != self.lease.fence:
            self.lost()
            raise Stopped
        if fresh.cancel_requested:
            self.cancel_seen()
            await self.writes.settle(Status.CANCELLED)
        if fresh.compact_requested:
            self.compactor.requested = True
        return await self.inbox.refill(fresh)

    async def _loop(self, *, final: bool) -> None:
        turns = 0
        while True:
            if self.activity.cancelled:
                await self.writes.settle(Status.CANCELLED)
            inputs = await self._read_inputs()
            if final:
                if not inputs:
                    try:
                        await self.writes.settle(
                            Status.SUCCEEDED, attention="question" if self._asked else None)
                    except PendingInput:
                        self.inbox.stale()  # a message came in unannounced: read it
                        continue
            deliver = to_deliver(inputs, final=final)
            if turns >= self.agent.max_turns:
                await self.writes.settle(
                    Status.FAILED,
                    ErrorInfo("incomplete", f"stopped after {turns} turns (max_turns)"),
                    [Incomplete(reason="max_turns").new()],
                )
            turns += 1
            try:
                final = await self._turn(turns, deliver)
            except PendingInput:
                # A settle inside the turn (a budget reached before a model call) found a
                # message that came in unannounced: deliver it with the next turn, whose
                # settle then holds (nothing was written: the settle put its steps back).
                self.inbox.stale()
                final = False

    # -- one turn --------------------------------------------------------------------------

    async def _turn(self, turn: int, deliver: Sequence[Event]) -> bool:
        """One model call and its tools; returns whether the model gave its final answer."""
        message_id = new_id("msg")
        self._asked = False
        # Delivery is explicit: exactly these messages are now in the model's view.
        start = TurnStart(turn=turn, message_id=message_id,
                          inputs=[e.seq for e in deliver] if deliver else None,
                          inputs_through=deliver[-1].seq if deliver else None)
        title = self._title_from(deliver)
        through = deliver[-1].seq if deliver else None
        users = [user_entry(e) for e in deliver]
        await self.model_caller.prepare(users)
        if self.activity.cancelled:  # it came during the summarizer
            await self.writes.settle(Status.CANCELLED)
        await self.writes.commit(
            users,
            [start.new()],
            delivered_through=through,
            title=title,
        )
        if through is not None:
            self.inbox.delivered(through)
        if title is not None:
            self._title_pending = False
        buf = await self.model_caller.call(message_id)
        if buf.aborted is not None:
            status = "cancelled" if buf.aborted is Abort.CANCEL else "interrupted"
            entries = [assistant_entry(buf.message_id, buf.text, [], status, status)]
            events = [*buf.drain(),
                      MessageEnd(message_id=buf.message_id, text=buf.text,
                                 stop_reason=status).new()]
            if buf.aborted is Abort.CANCEL:
                await self.writes.settle(Status.CANCELLED, events=events, entries=entries)
            await self.writes.commit(entries, events)
            return False
        stop = buf.stop_reason or "stop"
        u = buf.usage
        usage = None if u is None else Usage(
            input_tokens=u.input_tokens, output_tokens=u.output_tokens,
            cached_input_tokens=u.cached_input_tokens, reasoning_tokens=u.reasoning_tokens,
            estimated=u.estimated)
        end = MessageEnd(message_id=buf.message_id, text=buf.text, stop_reason=stop,
                         usage=usage)
        answer = [assistant_entry(buf.message_id, buf.text, buf.tool_calls, stop,
                                  reasoning=buf.reasoning, usage=buf.usage, call=buf.call)]
        ended = [*buf.drain(), end.new()]
        if stop == "length":
            await self.writes.settle(
                Status.FAILED,
                ErrorInfo("incomplete", "the model stopped at its output length limit"),
                [*ended, Incomplete(reason="length").new()],
                entries=answer,
            )
        # The answer rides with the next write: the first tool's start, or the next turn's
        # start, or the settle.
        self.writes.hold(answer, ended)
        if not buf.tool_calls:
            return True
        asked = False
        for i, call in enumerate(buf.tool_calls):
            if call.name == ASK_TOOL:
                asked = await self._ask(call) or asked
                continue
            if self.delegator.takes(call):  # started with the answer's others, below
                await self.delegator.collect(call)
                continue
            if self.clients.takes(call):  # its client runs it: waited on with the others
                await self.clients.collect_new(call)
                continue
            ruling = await self.gate.rule(call)
            if ruling.verdict is Verdict.ASK:
                await self._await_approval(call)
            if ruling.verdict is Verdict.DENY:
                entry, event = denial(call, ruling.reason)
                self.writes.hold([entry], [event])
                continue
            entry, event, interrupted = await self.tool_runner.run(call)
            if not interrupted:
                self.writes.hold([entry], [event])
                continue
            rest = [*never_started(buf.tool_calls[i + 1 :]), *self.delegator.dropped(),
                    *self.clients.dropped()]
            if self.activity.cancelled:
                await self.writes.settle(Status.CANCELLED, events=[event],
                                         entries=[entry, *rest])
            await self.writes.commit([entry, *rest], [event])
            return False
        await self.delegator.wait()  # the run stops here when a call delegated
        await self.clients.wait()  # or when one is its client's to run
        return asked

    async def _ask(self, call: ToolCall) -> bool:
        question = str(call.arguments.get("question", "")) or "?"
        options = call.arguments.get("options") or []
        result = ToolResult(True, {"asked": True}, None, 0)
        await self.writes.commit(
            [tool_result_entry(call.call_id, call.name, result, await_user=True)],
            [UserQuestion(question=question, options=options, call_id=call.call_id).new()],
        )
        self._asked = True
        return True
