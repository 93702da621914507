"""`outlive worker`: a process that only runs sessions (beside `outlive serve --no-worker`)."""

from __future__ import annotations

import asyncio
import signal

import typer
from rich.console import Console

from ..config import build_agents, build_providers, configure_logging, database_url
from ..domain.errors import InvalidInput
from ..domain.quotas import Quotas, parse_quotas_text
from . import event_loop
from .gc_tuning import tune_for_server
from .options import (
    AgentsOption,
    BackstopOption,
    CompactOption,
    ConcurrencyOption,
    DbOption,
    DemoCallsOption,
    GraceOption,
    HeartbeatOption,
    LeaseTtlOption,
    ListenDbOption,
    LogLevelOption,
    LoopOption,
    MetricsPortOption,
    PrivateWebhooksOption,
    QuotasOption,
    RetainOption,
    RoutesOption,
    SecretKeyFileOption,
    SpeedOption,
    WebhookBackoffMaxOption,
    WebhookBackoffOption,
    WebhookTimeoutOption,
    WorkerIdOption,
    agent_modules,
    checked_settings,
    chosen_loop,
)
from .settings import WORKER_DEFAULTS as D
from .settings import WorkerOptions
from .traces import traces

__all__ = ["checked_quotas", "install_stop", "worker"]

console = Console(stderr=True)


def checked_quotas(text: str | None) -> Quotas:
    """`--quotas` over the defaults (docs/quotas.md), a wrong value a usage error."""
    try:
        return parse_quotas_text(text)
    except InvalidInput as exc:
        raise typer.BadParameter(exc.message, param_hint="--quotas") from None


def install_stop(stop: asyncio.Event) -> None:
    """SIGTERM and SIGINT set `stop` (the process then finishes or parks its runs)."""
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)


def worker(
    db: DbOption = None,
    listen_db: ListenDbOption = None,
    concurrency: ConcurrencyOption = D.concurrency,
    lease_ttl: LeaseTtlOption = D.lease_ttl,
    heartbeat: HeartbeatOption = D.heartbeat,
    backstop: BackstopOption = D.backstop,
    grace: GraceOption = D.grace,
    agents: AgentsOption = None,
    demo_speed: SpeedOption = 1.0,
    demo_calls: DemoCallsOption = False,
    worker_id: WorkerIdOption = None,
    routes: RoutesOption = None,
    retain: RetainOption = D.retain,
    compact_after: CompactOption = D.compact_after,
    allow_private_webhooks: PrivateWebhooksOption = D.allow_private_webhooks,
    webhook_backoff: WebhookBackoffOption = D.webhook_backoff,
    webhook_backoff_max: WebhookBackoffMaxOption = D.webhook_backoff_max,
    webhook_timeout: WebhookTimeoutOption = D.webhook_timeout,
    log_level: LogLevelOption = "INFO",
    loop: LoopOption = "auto",
    metrics_port: MetricsPortOption = None,
    secret_key_file: SecretKeyFileOption = None,
    quotas: QuotasOption = None,
) -> None:
    """Run sessions: claim, keep leases, run turns, until SIGTERM (then finish or park)."""
    configure_logging(log_level)
    loop_name, factory = chosen_loop(loop)
    server_quotas = checked_quotas(quotas)
    settings = checked_settings(WorkerOptions(
        concurrency=concurrency, lease_ttl=lease_ttl, heartbeat=heartbeat, backstop=backstop,
        grace=grace, retain=retain, compact_after=compact_after,
        allow_private_webhooks=allow_private_webhooks, webhook_backoff=webhook_backoff,
        webhook_backoff_max=webhook_backoff_max, webhook_timeout=webhook_timeout))
    registry = build_agents(agent_modules(agents), demo_speed=demo_speed)
    providers = build_providers(demo_speed=demo_speed, routes_file=routes,
                                demo_calls=demo_calls)

    # Here, not at the top: `outlive --help` and `outlive sessions …` need none of it.
    import prometheus_client

    from ..runtime import Worker
    from .secret_key import key_source, open_sealed_store

    if metrics_port is not None:  # the process's counters, from a thread of their own
        prometheus_client.start_http_server(metrics_port, addr="127.0.0.1")

    async def go() -> None:
        url = database_url(db)
        store = await open_sealed_store(url, key_source(url, secret_key_file),
                                        listen_url=listen_db, quotas=server_quotas)
        w = Worker(store, registry, providers, settings, worker_id=worker_id)
        stop = asyncio.Event()
        install_stop(stop)
        task = asyncio.create_task(w.run())
        console.print(f"worker {w.id} on {store.dialect}; concurrency {concurrency}, "
                      f"lease {lease_ttl:g}s; agents: {', '.join(registry.names())}; "
                      f"loop {loop_name}")
        stopping = asyncio.create_task(stop.wait())
        await asyncio.wait({task, stopping}, return_when=asyncio.FIRST_COMPLETED)
        stopping.cancel()
        if not task.done():
            console.print(f"worker {w.id}: stopping (grace {grace:g}s)")
            w.request_stop()
        try:
            await task  # raises when one of its loops was given up: exit status 1
        finally:
            await store.close()

    with traces(console):
        tune_for_server()
        event_loop.run(go(), factory)
