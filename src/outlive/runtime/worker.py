"""The worker: claims sessions, keeps their leases, runs each in its own task.

Wakeups come from the Store's notices (LISTEN/NOTIFY on PostgreSQL, in-process on SQLite)
with a backstop scan, so a lost notification delays work by at most one backstop interval.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
from collections.abc import Coroutine
from dataclasses import replace
from typing import Any

from .. import metrics
from ..domain.errors import OutliveError
from ..domain.model import Claim, ErrorInfo, Status, new_id
from ..mcp import McpPool, McpUnavailable
from ..providers import ProviderRegistry
from ..store import Subscription, WorkerStore
from ..supervision import Failpoints, LoopFailed, LoopSupervisor, report_crash
from ..tools import ToolRegistry
from .agents import Agent, AgentRegistry
from .group_commit import GroupCommitter
from .housekeeping import expire_approvals, sweep
from .owner_budgets import OwnerBudgets
from .runner import Run
from .schedules import WAKEUP_TOOL, Firing, wakeup_tool
from .settings import RuntimeSettings
from .subagents import with_subagents
from .tree_budgets import TreeBudgets
from .webhooks import WebhookSender

__all__ = ["Worker"]

log = logging.getLogger("outlive.worker")


def default_worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{new_id('w')[-6:]}"


class Worker:
    def __init__(
        self,
        store: WorkerStore,
        agents: AgentRegistry,
        providers: ProviderRegistry,
        settings: RuntimeSettings | None = None,
        *,
        worker_id: str | None = None,
    ) -> None:
        self.store = store
        self.agents = agents
        self.providers = providers
        self.settings = settings or RuntimeSettings()
        self.id = worker_id or default_worker_id()
        self.runs: dict[str, Run] = {}
        self.committer = GroupCommitter(store) if self.settings.group_commit else None
        self.owner_budgets = OwnerBudgets(store)
        """Which owners have a monthly budget, and their calls' admission (docs/usage.md)."""
        self.tree_budgets = TreeBudgets(store, agents)
        """Sub-agent trees' calls admitted against their roots' budgets."""
        self._wake = asyncio.Event()
        self._stopping = asyncio.Event()
        self._side_tasks: set[asyncio.Task[None]] = set()
        self._last_beat_ok = time.monotonic()
        self._claiming = False
        self._sub: Subscription | None = None
        self._early: dict[str, bool] = {}
        """Sessions notified while a claim was in flight (id -> a cancel was asked): a run
        claimed in that call may have missed its notice."""
        self.claimed = 0
        self.finished = 0
        self.started = asyncio.Event()
        self.mcp = McpPool(agents.mcp_servers())
        """One client session per MCP server, shared by this worker's runs."""
        self.loops = LoopSupervisor(f"worker {self.id}", on_failure=self._loop_failed)
        """Its long-lived loops: one given up stops the worker, and `run()` raises it."""
        self._failpoints = Failpoints.from_env()  # test-only (docs/architecture.md §5)
        self._woken: dict[str, tuple[Agent, Agent]] = {}
        """Agents with wake-ups: (as registered, with `schedule_wakeup`), by name."""

    # -- lifecycle -------------------------------------------------------------------------

    async def run(self) -> None:
        """Work until `request_stop()`; then finish or park every run (graceful shutdown).
        When one of its loops is given up (`self.loops`) the worker stops the same way and
        then raises that `LoopFailed`."""
        try:
            await self.mcp.start()
        except BaseException:
            await self.mcp.close()
            raise
        sub = self._sub = self.store.subscribe(reads=False)  # work and cancels only
        try:
            async with self.loops as loops:  # after the drain: runs need their heartbeats
                loops.start("worker-listen", lambda: self._listen(sub))
                loops.start("worker-heartbeat", self._heartbeats)
                loops.start("worker-abandon", self._abandon_scan)
                if self.settings.sweep_interval is not None:
                    loops.start("worker-sweep", self._sweeps)
                if self.settings.webhooks:
                    loops.start("worker-webhooks",
                                WebhookSender(self.store, self.settings).run)
                if self.settings.schedules:
                    loops.start("worker-firing", Firing(self.store, self.settings).run)
                with contextlib.suppress(Exception):
                    await self.store.wait_listening()
                self.started.set()
                try:
                    await self._claim_loop()
                finally:
                    await self._drain()
        finally:
            await sub.close()
            await self.mcp.close()

    def request_stop(self) -> None:
        self._stopping.set()
        self._wake.set()

    def _loop_failed(self, failure: LoopFailed) -> None:
        log.error("worker %s: %s; stopping", self.id, failure)
        self.request_stop()

    async def _drain(self) -> None:
        """Stop claiming; let runs finish within the grace period; park the rest."""
        tasks = [r.task for r in self.runs.values() if r.task is not None]
        if tasks:
            log.info("worker %s: waiting up to %.1fs for %d runs", self.id,
                     self.settings.grace, len(tasks))
            _, pending = await asyncio.wait(tasks, timeout=self.settings.grace)
            if pending:
                log.info("worker %s: parking %d runs for another worker", self.id, len(pending))
                for r in list(self.runs.values()):
                    r.park()
                await asyncio.wait(pending, timeout=10)

    # -- claiming --------------------------------------------------------------------------

    async def _claim_loop(self) -> None:
        backoff = 0.1
        while not self._stopping.is_set():
            self._wake.clear()
            free = self.settings.concurrency - len(self.runs)
            claims: list[Claim] = []
            behind = self._behind()
            if free > 0 and not behind:
                self._claiming = True
                try:
                    claims = await self.store.claim(
                        self.id, limit=free, lease_ttl=self.settings.lease_ttl,
                        max_attempts=self.settings.max_attempts, start=True,
                    )
                    backoff = 0.1
                except Exception as exc:
                    log.warning("claim failed (%s); retrying in %.1fs", exc, backoff)
                    await asyncio.sleep(backoff)
                    backoff = min(backoff * 2, 5.0)
                    continue
                finally:
                    self._claiming = False
            early, self._early = self._early, {}
            for c in claims:
                if c.lease is not None:
                    self._start(c)
                    run = self.runs.get(c.session.id)
                    if run is not None and c.session.id in early:
                        if early[c.session.id]:
                            run.cancel_seen()
                        run.poke()
            if claims and len(claims) == free:
                continue  # there may be more waiting
            timeout = self.settings.backstop_interval
            if behind:  # look again soon: the database may have caught up
                timeout = behind if timeout is None else min(timeout, behind)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout):
                    await self._wake.wait()

    def _behind(self) -> float:
        """While the database is behind our writes, how long to wait before looking again
        (0: it keeps up, claim)."""
        if self.committer is None or self.committer.lag <= self.settings.max_write_lag:
            return 0.0
        return self.settings.max_write_lag / 4

    def _start(self, claim: Claim) -> None:
        assert claim.lease is not None
        session = claim.session
        self.claimed += 1
        metrics.CLAIMS.labels(claim.reason.value).inc()
        try:
            agent = self._with_mcp_tools(with_subagents(
                self._with_wakeups(self.agents.get(session.agent)), self.agents))
            provider, model_name = self.providers.resolve(session.model)
        except OutliveError as exc:
            self._refuse_later(claim, ErrorInfo("configuration", exc.message))
            return
        except McpUnavailable as exc:
            self._refuse_later(claim, ErrorInfo("mcp_unavailable", str(exc)))
            return
        # Asked at each claim: a run claimed while LISTEN is down reads on a timer too.
        complete = self._sub is not None and self._sub.complete
        run = Run(self.store, claim, agent, provider, model_name, self.settings,
                  self.committer, notices_complete=complete,
                  limits=self.providers.limits(session.model),
                  summarizers=self.providers.resolve, prices=self.providers.price,
                  owner_budgets=self.owner_budgets, tree_budgets=self.tree_budgets)
        self.runs[session.id] = run
        run.task = asyncio.create_task(run.main(), name=f"run:{session.id}")
        sid = session.id

        def done(_: asyncio.Task[None]) -> None:
            self._finished(sid)

        run.task.add_done_callback(done)
        metrics.RUNS_ACTIVE.inc()
        log.info("worker %s runs %s (%s, attempt %d, fence %d)", self.id, session.id,
                 claim.reason.value, session.attempt, claim.lease.fence)

    def _with_wakeups(self, agent: Agent) -> Agent:
        """The agent with `schedule_wakeup` when it opted in (`Agent.wakeups`), made once
        per agent."""
        if not agent.wakeups or WAKEUP_TOOL in agent.tools:
            return agent
        made = self._woken.get(agent.name)
        if made is None or made[0] is not agent:
            tools = ToolRegistry([*agent.tools, wakeup_tool(self.store, self.settings)])
            made = self._woken[agent.name] = (agent, replace(agent, tools=tools))
        return made[1]

    def _with_mcp_tools(self, agent: Agent) -> Agent:
        """The agent with the tools of its MCP servers as this worker's connections list
        them now."""
        if not agent.mcp_servers:
            return agent
        extra = self.mcp.tools_for(agent.mcp_servers)
        try:
            return replace(agent, tools=ToolRegistry([*agent.tools, *extra]))
        except ValueError as exc:  # an MCP tool named like one of the agent's own
            raise McpUnavailable(f"agent {agent.name!r}: {exc}") from exc

    def _refuse_later(self, claim: Claim, error: ErrorInfo) -> None:
        self._side("worker-refuse", self._refuse(claim, error))

    def _side(self, name: str, work: Coroutine[Any, Any, Any]) -> None:
        """A task nobody awaits, kept until done; its error is logged and counted."""
        task = asyncio.create_task(work)
        self._side_tasks.add(task)
        task.add_done_callback(report_crash(name))
        task.add_done_callback(self._side_tasks.discard)

    async def _refuse(self, claim: Claim, error: ErrorInfo) -> None:
        """A session whose agent, route or MCP server this worker cannot serve fails with
        the reason."""
        assert claim.lease is not None
        with contextlib.suppress(OutliveError):
            await self.store.settle(claim.lease, Status.FAILED, error=error)

    def _finished(self, session_id: str) -> None:
        run = self.runs.pop(session_id, None)
        if run is not None:
            metrics.RUNS_ACTIVE.dec()
            if run.session.parent_id is not None and not self._stopping.is_set():
                # A detached child's report goes to its parent now rather than at the scan.
                self._side("worker-reports", self.store.post_reports())
        self.finished += 1
        self._wake.set()

    # -- wakeups ---------------------------------------------------------------------------

    async def _listen(self, sub: Subscription) -> None:
        self._rescan()  # a restarted loop may have lost notices meanwhile
        async for notice in sub:
            self._failpoints.hit("worker-listen")
            if notice.is_rescan:
                self._rescan()
                continue
            run = self.runs.get(notice.session_id)
            if run is not None:
                if notice.cancel:
                    run.cancel_seen()  # abort first; the poke's read confirms the rest
                if notice.work:
                    run.poke()
            elif notice.work:
                if self._claiming:
                    sid = notice.session_id
                    self._early[sid] = self._early.get(sid, False) or notice.cancel
                self._wake.set()
        if not self._stopping.is_set():  # the subscription ended under a working worker
            raise RuntimeError("the store's notice subscription ended")

    def _rescan(self) -> None:
        self._wake.set()
        for r in list(self.runs.values()):
            r.poke()

    # -- leases ----------------------------------------------------------------------------

    async def _heartbeats(self) -> None:
        while True:
            await asyncio.sleep(self.settings.heartbeat_interval)
            runs = list(self.runs.values())
            if not runs:
                self._last_beat_ok = time.monotonic()
                continue
            try:
                held = await self.store.heartbeat(
                    self.id, [r.lease for r in runs], lease_ttl=self.settings.lease_ttl
                )
            except Exception as exc:
                log.warning("heartbeat failed: %s", exc)
                if time.monotonic() - self._last_beat_ok > self.settings.lease_ttl:
                    for r in runs:  # our leases have surely expired: stop wasting work
                        r.lost()
                continue
            self._last_beat_ok = time.monotonic()
            by_id = {h.session_id: h for h in held}
            for r in runs:
                h = by_id.get(r.session_id)
                if h is None:
                    if r.task is not None and not r.task.done():
                        r.lost()
                elif h.cancel_requested:
                    r.cancel_seen()

    async def _sweeps(self) -> None:
        """Bounded storage (docs/retention.md): a pass every `sweep_interval`, the first one
        interval after start, so a worker's first moments are spent on sessions."""
        interval = self.settings.sweep_interval
        assert interval is not None
        while True:
            await asyncio.sleep(interval)
            try:
                await sweep(self.store, self.settings)
            except Exception as exc:
                log.warning("storage sweep failed: %s", exc)

    async def _abandon_scan(self) -> None:
        while True:
            await asyncio.sleep(self.settings.abandon_check_interval)
            try:
                await self.store.cancel_abandoned()
                await expire_approvals(self.store, self.settings)
                await self.store.post_reports()  # a backstop: a run's end posts them first
            except Exception as exc:
                log.warning("abandon scan failed: %s", exc)
