"""`outlive serve`: the API, the web workbench and (unless `--no-worker`) an in-process worker
with every option `outlive worker` has, built through the same `runtime_settings`."""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console

from ..config import build_agents, build_providers, configure_logging, database_url, parse_duration
from ..domain.quotas import DEFAULT_QUOTAS, Quotas
from . import event_loop
from .gc_tuning import tune_for_server
from .local_key import key_file, local_key
from .options import (
    CONCURRENCY_HELP,
    AgentsOption,
    BackstopOption,
    CompactOption,
    DbOption,
    DemoCallsOption,
    GraceOption,
    HeartbeatOption,
    KeyFileOption,
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
from .port import port_problem
from .secret_key import KeySource, key_source
from .settings import WORKER_DEFAULTS as D
from .settings import WorkerOptions
from .traces import traces
from .worker import checked_quotas

if TYPE_CHECKING:  # the store, runtime and API are imported when a command runs, not by --help
    import uvicorn

    from ..api import ApiSettings
    from ..providers import ProviderRegistry
    from ..runtime import RuntimeSettings, Worker
    from ..runtime.agents import AgentRegistry
    from ..store import Store
    from ..supervision import LoopSupervisor

__all__ = ["serve"]

console = Console(stderr=True)
out = Console()

ServeConcurrencyOption = Annotated[int, typer.Option(
    "--concurrency", "--workers", help=CONCURRENCY_HELP)]
"""`--concurrency` as on `outlive worker`; `--workers` is its older name on `serve`."""


@dataclass(frozen=True)
class ServePlan:
    """Everything `serve` decided from its options before it opens anything."""

    url: str
    listen_url: str | None
    host: str
    port: int
    forwarded_allow_ips: str
    metrics_port: int | None
    keys: Path
    secret_keys: KeySource
    """Where the key that seals webhook secrets comes from (`cli.secret_key`)."""
    replica: bool
    """An API beside other workers on PostgreSQL: makes no local key."""
    run_worker: bool
    worker_id: str | None
    loop_name: str
    registry: AgentRegistry
    providers: ProviderRegistry
    api_settings: ApiSettings
    settings: RuntimeSettings
    quotas: Quotas = DEFAULT_QUOTAS
    """The server's quotas (docs/quotas.md), for its API and its worker alike."""


def serve(
    db: DbOption = None,
    listen_db: ListenDbOption = None,
    host: Annotated[str, typer.Option(help="Interface to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on.")] = 8765,
    no_worker: Annotated[
        bool, typer.Option("--no-worker", help="API only (for replicas beside `outlive worker`)."
                                               " A replica on PostgreSQL makes no local key.")
    ] = False,
    concurrency: ServeConcurrencyOption = D.concurrency,
    agents: AgentsOption = None,
    demo_speed: SpeedOption = 1.0,
    demo_calls: DemoCallsOption = False,
    key_file_option: KeyFileOption = None,
    secret_key_file: SecretKeyFileOption = None,
    lease_ttl: LeaseTtlOption = D.lease_ttl,
    heartbeat: HeartbeatOption = D.heartbeat,
    backstop: BackstopOption = D.backstop,
    grace: GraceOption = D.grace,
    worker_id: WorkerIdOption = None,
    routes: RoutesOption = None,
    retain: RetainOption = D.retain,
    compact_after: CompactOption = D.compact_after,
    purge_grace: Annotated[
        str, typer.Option("--purge-grace", envvar="OUTLIVE_PURGE_GRACE",
                          help="A deleted session's content is purged this long after the "
                               "DELETE (?purge=now: at once).")
    ] = "5m",
    allow_private_webhooks: PrivateWebhooksOption = D.allow_private_webhooks,
    webhook_backoff: WebhookBackoffOption = D.webhook_backoff,
    webhook_backoff_max: WebhookBackoffMaxOption = D.webhook_backoff_max,
    webhook_timeout: WebhookTimeoutOption = D.webhook_timeout,
    log_level: LogLevelOption = "INFO",
    loop: LoopOption = "auto",
    quotas: QuotasOption = None,
    cookie_secure: Annotated[
        bool, typer.Option("--cookie-secure", envvar="OUTLIVE_COOKIE_SECURE", show_envvar=False,
                           help="Always mark the login cookie Secure (it is anyway on requests "
                                "that came over HTTPS) [env OUTLIVE_COOKIE_SECURE=1].")
    ] = False,
    forwarded_allow_ips: Annotated[
        str, typer.Option("--forwarded-allow-ips", envvar="OUTLIVE_FORWARDED_ALLOW_IPS",
                          show_envvar=False, show_default=False,
                          help="Proxies whose X-Forwarded-For/-Proto are trusted, "
                               "comma-separated, '*' for any [env OUTLIVE_FORWARDED_ALLOW_IPS; "
                               "default 127.0.0.1].")
    ] = "127.0.0.1",
    metrics_token: Annotated[
        str | None, typer.Option("--metrics-token", envvar="OUTLIVE_METRICS_TOKEN",
                                 show_envvar=False,
                                 help="Serve GET /metrics on the API port to 'Authorization: "
                                      "Bearer <token>' [env OUTLIVE_METRICS_TOKEN].")
    ] = None,
    metrics_port: MetricsPortOption = None,
    cors_origin: Annotated[
        list[str] | None, typer.Option(
            "--cors-origin", envvar="OUTLIVE_CORS_ORIGINS", show_envvar=False,
            help="Let pages of this origin (scheme://host[:port]) call the API and its chat "
                 "surfaces with a browser token, never with cookies (repeatable) [env "
                 "OUTLIVE_CORS_ORIGINS, origins separated by spaces].")
    ] = None,
    api_docs: Annotated[
        bool, typer.Option("--api-docs", help="Serve /docs and /redoc (they load scripts "
                           "from a CDN).")
    ] = False,
) -> None:
    """Serve the API, the web workbench and (unless --no-worker) an in-process worker."""
    from ..api import ApiSettings

    configure_logging(log_level)
    if (problem := port_problem(host, port)) is not None:  # before creating any file
        console.print(f"error: {problem}", highlight=False, markup=False, soft_wrap=True)
        raise typer.Exit(1)
    loop_name, factory = chosen_loop(loop)
    server_quotas = checked_quotas(quotas)
    settings = checked_settings(WorkerOptions(
        concurrency=concurrency, lease_ttl=lease_ttl, heartbeat=heartbeat, backstop=backstop,
        grace=grace, retain=retain, compact_after=compact_after,
        allow_private_webhooks=allow_private_webhooks, webhook_backoff=webhook_backoff,
        webhook_backoff_max=webhook_backoff_max, webhook_timeout=webhook_timeout))
    try:
        purge_grace_s = parse_duration(purge_grace) or 0.0
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--purge-grace") from None
    try:
        api_settings = ApiSettings(
            cookie_secure=cookie_secure, metrics_token=metrics_token or None,
            api_docs=api_docs, purge_grace=purge_grace_s,
            allow_private_webhooks=allow_private_webhooks,
            cors_origins=tuple(cors_origin or ()))
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--cors-origin") from None
    url = database_url(db)
    plan = ServePlan(
        url=url, listen_url=listen_db, host=host, port=port,
        forwarded_allow_ips=forwarded_allow_ips, metrics_port=metrics_port,
        keys=key_file(url, key_file_option), secret_keys=key_source(url, secret_key_file),
        replica=no_worker and not url.startswith("sqlite"),
        run_worker=not no_worker, worker_id=worker_id, loop_name=loop_name,
        registry=build_agents(agent_modules(agents), demo_speed=demo_speed),
        providers=build_providers(demo_speed=demo_speed, routes_file=routes,
                                  demo_calls=demo_calls),
        api_settings=api_settings,
        settings=settings, quotas=server_quotas,
    )
    with traces(console):
        tune_for_server()
        event_loop.run(run_server(plan), factory)


async def run_server(plan: ServePlan) -> None:
    """Open the store, serve until SIGTERM, then stop the worker (its runs finish or park)."""
    import uvicorn

    from ..api import create_app
    from ..runtime import Catalog, Worker
    from .secret_key import open_sealed_store

    store = await open_sealed_store(plan.url, plan.secret_keys, listen_url=plan.listen_url,
                                    quotas=plan.quotas)
    key = None if plan.replica else await local_key(store, plan.keys)
    api = create_app(store, catalog=Catalog(plan.registry, plan.providers),
                     settings=plan.api_settings)
    config = uvicorn.Config(api, host=plan.host, port=plan.port, log_level="warning",
                            lifespan="on", timeout_graceful_shutdown=3, proxy_headers=True,
                            forwarded_allow_ips=plan.forwarded_allow_ips)

    class Server(uvicorn.Server):
        def handle_exit(self, sig: int, frame: FrameType | None) -> None:
            # Open streams would hold shutdown up; clients reattach with Last-Event-ID.
            api.state.ctx.hub.close_streams()
            super().handle_exit(sig, frame)

    server = Server(config)
    metrics_server = None
    if plan.metrics_port is not None:
        metrics_server = await _start_metrics(api.state.ctx, plan.metrics_port)
    w = None
    worker_task = None
    if plan.run_worker:
        w = Worker(store, plan.registry, plan.providers, plan.settings,
                   worker_id=plan.worker_id)
        worker_task = asyncio.create_task(w.run())
        console.print(f"worker {w.id}: concurrency {plan.settings.concurrency}, lease "
                      f"{plan.settings.lease_ttl:g}s; loop {plan.loop_name}", highlight=False)
    announcer = asyncio.create_task(_announce(server, plan, store, key))
    watcher = asyncio.create_task(_stop_on_failure(server, api.state.ctx.hub.loops, w))
    try:
        await server.serve()
    finally:
        announcer.cancel()
        watcher.cancel()
        if metrics_server is not None:
            with contextlib.suppress(Exception):
                await metrics_server.shutdown()
        try:
            if w is not None and worker_task is not None:
                console.print("stopping the worker (finishing or parking runs)")
                w.request_stop()
                await worker_task  # raises when one of its loops was given up
        finally:
            await store.close()
    if (failure := api.state.ctx.hub.loops.failure) is not None:
        raise failure


async def _stop_on_failure(server: uvicorn.Server, hub_loops: LoopSupervisor,
                           w: Worker | None) -> None:
    """A loop of the worker or the hub given up stops the server (exit status 1)."""
    failed = [asyncio.create_task(hub_loops.wait_failed())]
    if w is not None:
        failed.append(asyncio.create_task(w.loops.wait_failed()))
    try:
        done, _ = await asyncio.wait(failed, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for t in failed:
            t.cancel()
    console.print(f"stopping: {done.pop().result()}", highlight=False, markup=False)
    server.should_exit = True


async def _start_metrics(ctx: Any, port: int) -> uvicorn.Server:
    """GET /metrics on 127.0.0.1:`port`, started and stopped by hand: `serve()` would take
    over the signal handlers."""
    import uvicorn

    from ..api import metrics_app

    server = uvicorn.Server(uvicorn.Config(metrics_app(ctx), host="127.0.0.1", port=port,
                                           log_level="warning", lifespan="off"))
    server.config.load()
    server.lifespan = server.config.lifespan_class(server.config)
    await server.startup()
    return server


async def _announce(server: uvicorn.Server, plan: ServePlan, store: Store,
                    key: str | None) -> None:
    """Once the server listens: where it is, and how to log in (a new key only now)."""
    while not server.started:  # noqa: ASYNC110 - uvicorn exposes a flag, not an event
        await asyncio.sleep(0.05)
    shown = "localhost" if plan.host in ("127.0.0.1", "0.0.0.0") else plan.host
    base = f"http://{shown}:{plan.port}"
    say = [f"outlive is serving on {base}  ({store.dialect}: {plan.url})"]
    if plan.metrics_port is not None:
        say.append(f"metrics on http://127.0.0.1:{plan.metrics_port}/metrics")
    if key is not None:
        say += [f"open {base}/ and log in with this new key of owner 'local' (shown "
                f"only now; kept in {plan.keys.resolve()}):", key]
    elif not plan.replica:
        say.append(f"open {base}/ and log in with the key of owner 'local' in "
                   f"{plan.keys.resolve()}")
    else:
        say.append("an API replica: make keys with `outlive keys create`")
    for line in say:
        out.print(line, highlight=False, soft_wrap=True)
    out.file.flush()
