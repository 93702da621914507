"""The `outlive` command line."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from pathlib import Path
from types import FrameType
from typing import Annotated

import typer
from rich.console import Console

from ._cli_admin import DbOption, keys_app, owners_app
from ._cli_errors import run_cli
from ._cli_port import port_problem
from ._cli_sessions import sessions_app
from ._cli_webhooks import (
    PrivateWebhooksOption,
    WebhookBackoffMaxOption,
    WebhookBackoffOption,
    WebhookTimeoutOption,
)
from ._gc import tune_for_server
from ._loop import loop_factory
from ._loop import run as run_loop
from .config import (
    build_agents,
    build_providers,
    configure_logging,
    database_url,
    listen_database_url,
    parse_duration,
)
from .runtime import DEFAULT_CONCURRENCY, Catalog, RuntimeSettings, Worker
from .store import Store, open_store

app = typer.Typer(
    help="outlive: durable agent sessions that outlive requests, tabs and workers.",
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode=None,  # help texts are plain: Rich markup would eat "[env …]"
)
app.add_typer(keys_app, name="keys")
app.add_typer(owners_app, name="owners")
app.add_typer(sessions_app, name="sessions")

console = Console(stderr=True)
out = Console()

ListenDbOption = Annotated[
    str | None,
    typer.Option("--listen-db", help="Direct PostgreSQL URL for LISTEN when --db is a "
                                     "pooler in transaction mode (PgBouncer) "
                                     "[env OUTLIVE_LISTEN_DB]"),
]
AgentsOption = Annotated[
    list[str] | None,
    typer.Option("--agents", help="Python module that registers agents, or an agents .toml "
                                  "file (repeatable)."),
]
RoutesOption = Annotated[
    str | None,
    typer.Option("--routes", help="TOML file of model routes [env OUTLIVE_ROUTES]."),
]
SpeedOption = Annotated[
    float, typer.Option("--demo-speed", help="Pacing of the demo model; 0 = instant.")
]
RetainOption = Annotated[
    str | None,
    typer.Option("--retain", envvar="OUTLIVE_RETAIN",
                 help="Purge sessions that ended this long ago (30d, 12h, …) "
                      "[default: keep forever]. See docs/retention.md."),
]
CompactOption = Annotated[
    str,
    typer.Option("--compact-after", envvar="OUTLIVE_COMPACT_AFTER",
                 help="Compact a finished session's deltas this long after it ended; off = "
                      "never."),
]


def _storage_settings(retain: str | None, compact_after: str) -> tuple[float | None, float | None]:
    """(retain, compact_after) in seconds, from the options' durations."""
    try:
        return parse_duration(retain), parse_duration(compact_after)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None


def _install_stop(stop: asyncio.Event) -> None:
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)


@app.command()
def migrate(db: DbOption = None) -> None:
    """Create or upgrade the database schema."""

    async def go() -> int:
        store = await open_store(database_url(db), migrate=False,
                                 listen_url=listen_database_url(None))
        try:
            return await store.migrate()
        finally:
            await store.close()

    n = asyncio.run(go())
    console.print(f"applied {n} migration(s) to {database_url(db)}")


@app.command()
def worker(
    db: DbOption = None,
    listen_db: ListenDbOption = None,
    concurrency: Annotated[int, typer.Option(
        help="Sessions run at once (they mostly wait on models; see docs/deploy.md)."
    )] = DEFAULT_CONCURRENCY,
    lease_ttl: Annotated[float, typer.Option(help="Lease time-to-live, seconds.")] = 10.0,
    heartbeat: Annotated[
        float | None, typer.Option(help="Heartbeat interval, seconds [default: 2, or TTL/4].")
    ] = None,
    backstop: Annotated[
        float, typer.Option(help="Claim scan interval when no wakeup came; 0 = off.")
    ] = 1.0,
    grace: Annotated[float, typer.Option(help="Shutdown grace period, seconds.")] = 10.0,
    agents: AgentsOption = None,
    demo_speed: SpeedOption = 1.0,
    worker_id: Annotated[str | None, typer.Option(help="Name in leases and logs.")] = None,
    routes: RoutesOption = None,
    retain: RetainOption = None,
    compact_after: CompactOption = "5m",
    allow_private_webhooks: PrivateWebhooksOption = False,
    webhook_backoff: WebhookBackoffOption = 5.0,
    webhook_backoff_max: WebhookBackoffMaxOption = 3600.0,
    webhook_timeout: WebhookTimeoutOption = 10.0,
    log_level: Annotated[str, typer.Option(help="Logging level.")] = "INFO",
    loop: Annotated[str, typer.Option(
        help="Event loop: auto (uvloop when installed), asyncio, uvloop."
    )] = "auto",
) -> None:
    """Run sessions: claim, keep leases, run turns, until SIGTERM (then finish or park)."""
    configure_logging(log_level)
    try:
        loop_name, factory = loop_factory(loop)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--loop") from None
    retain_s, compact_s = _storage_settings(retain, compact_after)
    settings = RuntimeSettings(
        lease_ttl=lease_ttl,
        heartbeat_interval=heartbeat or RuntimeSettings.heartbeat_for(lease_ttl),
        backstop_interval=backstop or None,
        concurrency=concurrency,
        grace=grace,
        retain=retain_s,
        compact_after=compact_s,
        allow_private_webhooks=allow_private_webhooks,
        webhook_backoff=webhook_backoff,
        webhook_backoff_max=webhook_backoff_max,
        webhook_timeout=webhook_timeout,
    )
    registry = build_agents(agents or [], demo_speed=demo_speed)
    providers = build_providers(demo_speed=demo_speed, routes_file=routes)

    async def go() -> None:
        store = await open_store(database_url(db), listen_url=listen_database_url(listen_db))
        w = Worker(store, registry, providers, settings, worker_id=worker_id)
        stop = asyncio.Event()
        _install_stop(stop)
        task = asyncio.create_task(w.run())
        console.print(f"worker {w.id} on {store.dialect}; concurrency {concurrency}, "
                      f"lease {lease_ttl:g}s; agents: {', '.join(registry.names())}; "
                      f"loop {loop_name}")
        await stop.wait()
        console.print(f"worker {w.id}: stopping (grace {grace:g}s)")
        w.request_stop()
        await task
        await store.close()

    tune_for_server()
    run_loop(go(), factory)


def _key_file(db_url: str, option: str | None) -> Path:
    """Where `serve` keeps the local owner's key between starts (mode 0600)."""
    if option:
        return Path(option)
    if db_url.startswith("sqlite"):
        path = db_url.removeprefix("sqlite://").removeprefix("/")
        return Path(path + ".key")
    return Path("outlive.key")


async def _local_key(store: Store, key_file: Path) -> str | None:
    """A new key for the owner `local` when the saved one is missing or no longer works;
    None when the saved one works (it is not printed again: logs keep what is printed)."""
    from .api import hash_key, new_key

    saved = _read_key(key_file)
    if saved and await store.owner_for_key(hash_key(saved)) is not None:
        return None
    owner = await store.ensure_owner("local")
    key = new_key()
    await store.create_api_key(owner.id, hash_key(key), "created by outlive serve")
    _write_key(key_file, key)
    return key


def _read_key(path: Path) -> str | None:
    return path.read_text().strip() if path.exists() else None


def _write_key(path: Path, key: str) -> None:
    """Written 0600 from the first byte (never readable by others, not even briefly)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        os.fchmod(fd, 0o600)
        f.write(key + "\n")


def _env_flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")


@app.command()
def serve(
    db: DbOption = None,
    listen_db: ListenDbOption = None,
    host: Annotated[str, typer.Option(help="Interface to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on.")] = 8765,
    no_worker: Annotated[
        bool, typer.Option("--no-worker", help="API only (for replicas beside `outlive worker`)."
                                               " A replica on PostgreSQL makes no local key.")
    ] = False,
    workers: Annotated[int, typer.Option("--workers", help="Sessions the in-process worker "
                                                           "runs at once.")
                       ] = DEFAULT_CONCURRENCY,
    agents: AgentsOption = None,
    demo_speed: SpeedOption = 1.0,
    key_file: Annotated[
        str | None, typer.Option(help="Where the local key is kept [default: next to the "
                                      "SQLite file, or ./outlive.key]")
    ] = None,
    lease_ttl: Annotated[float, typer.Option(help="Lease time-to-live, seconds.")] = 10.0,
    routes: RoutesOption = None,
    retain: RetainOption = None,
    compact_after: CompactOption = "5m",
    purge_grace: Annotated[
        str, typer.Option("--purge-grace", envvar="OUTLIVE_PURGE_GRACE",
                          help="A deleted session's content is purged this long after the "
                               "DELETE (?purge=now: at once).")
    ] = "5m",
    allow_private_webhooks: PrivateWebhooksOption = False,
    webhook_backoff: WebhookBackoffOption = 5.0,
    webhook_backoff_max: WebhookBackoffMaxOption = 3600.0,
    webhook_timeout: WebhookTimeoutOption = 10.0,
    log_level: Annotated[str, typer.Option(help="Logging level.")] = "INFO",
    cookie_secure: Annotated[
        bool, typer.Option("--cookie-secure", help="Always mark the login cookie Secure (it "
                           "is anyway on requests that came over HTTPS) [env "
                           "OUTLIVE_COOKIE_SECURE=1].")
    ] = False,
    forwarded_allow_ips: Annotated[
        str | None, typer.Option("--forwarded-allow-ips", help="Proxies whose "
                                 "X-Forwarded-For/-Proto are trusted, comma-separated, '*' for "
                                 "any [env OUTLIVE_FORWARDED_ALLOW_IPS; default 127.0.0.1].")
    ] = None,
    metrics_token: Annotated[
        str | None, typer.Option("--metrics-token", help="Serve GET /metrics on the API port "
                                 "to 'Authorization: Bearer <token>' [env "
                                 "OUTLIVE_METRICS_TOKEN].")
    ] = None,
    metrics_port: Annotated[
        int | None, typer.Option("--metrics-port", help="Serve GET /metrics without a token "
                                 "on this port of 127.0.0.1 [env OUTLIVE_METRICS_PORT].")
    ] = None,
    api_docs: Annotated[
        bool, typer.Option("--api-docs", help="Serve /docs and /redoc (they load scripts "
                           "from a CDN).")
    ] = False,
) -> None:
    """Serve the API, the web workbench and (unless --no-worker) an in-process worker."""
    import uvicorn

    from .api import ApiSettings, create_app, metrics_app

    configure_logging(log_level)
    if (problem := port_problem(host, port)) is not None:  # before creating any file
        console.print(f"error: {problem}", highlight=False, markup=False, soft_wrap=True)
        raise typer.Exit(1)
    retain_s, compact_s = _storage_settings(retain, compact_after)
    try:
        grace_s = parse_duration(purge_grace) or 0.0
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None
    url = database_url(db)
    registry = build_agents(agents or [], demo_speed=demo_speed)
    providers = build_providers(demo_speed=demo_speed, routes_file=routes)
    settings = ApiSettings(
        cookie_secure=cookie_secure or _env_flag("OUTLIVE_COOKIE_SECURE"),
        metrics_token=metrics_token or os.environ.get("OUTLIVE_METRICS_TOKEN") or None,
        api_docs=api_docs,
        purge_grace=grace_s,
        allow_private_webhooks=allow_private_webhooks,
    )
    forwarded = (forwarded_allow_ips or os.environ.get("OUTLIVE_FORWARDED_ALLOW_IPS")
                 or "127.0.0.1")
    env_port = os.environ.get("OUTLIVE_METRICS_PORT")
    metrics_at = metrics_port if metrics_port is not None else (
        int(env_port) if env_port else None)
    keys = _key_file(url, key_file)
    replica = no_worker and not url.startswith("sqlite")

    async def go() -> None:
        store = await open_store(url, listen_url=listen_database_url(listen_db))
        key = None if replica else await _local_key(store, keys)
        api = create_app(store, catalog=Catalog(registry, providers),
                         settings=settings)
        config = uvicorn.Config(api, host=host, port=port, log_level="warning",
                                lifespan="on", timeout_graceful_shutdown=3,
                                proxy_headers=True, forwarded_allow_ips=forwarded)

        class Server(uvicorn.Server):
            def handle_exit(self, sig: int, frame: FrameType | None) -> None:
                # Open streams would hold shutdown up; clients reattach with Last-Event-ID.
                api.state.ctx.hub.close_streams()
                super().handle_exit(sig, frame)

        server = Server(config)
        metrics_server = None
        if metrics_at is not None:
            # Started and stopped by hand: `serve()` would take over the signal handlers.
            metrics_server = uvicorn.Server(uvicorn.Config(
                metrics_app(api.state.ctx), host="127.0.0.1", port=metrics_at,
                log_level="warning", lifespan="off"))
            metrics_server.config.load()
            metrics_server.lifespan = metrics_server.config.lifespan_class(
                metrics_server.config)
            await metrics_server.startup()
        w = None
        worker_task = None
        if not no_worker:
            w = Worker(store, registry, providers,
                       RuntimeSettings(concurrency=workers, lease_ttl=lease_ttl,
                                       heartbeat_interval=RuntimeSettings.heartbeat_for(
                                           lease_ttl),
                                       retain=retain_s, compact_after=compact_s,
                                       allow_private_webhooks=allow_private_webhooks,
                                       webhook_backoff=webhook_backoff,
                                       webhook_backoff_max=webhook_backoff_max,
                                       webhook_timeout=webhook_timeout))
            worker_task = asyncio.create_task(w.run())
        shown = "localhost" if host in ("127.0.0.1", "0.0.0.0") else host

        async def announce() -> None:
            while not server.started:  # noqa: ASYNC110 - uvicorn exposes a flag, not an event
                await asyncio.sleep(0.05)
            base = f"http://{shown}:{port}"
            say = [f"outlive is serving on {base}  ({store.dialect}: {url})"]
            if metrics_at is not None:
                say.append(f"metrics on http://127.0.0.1:{metrics_at}/metrics")
            if key is not None:
                say += [f"open {base}/ and log in with this new key of owner 'local' (shown "
                        f"only now; kept in {keys.resolve()}):", key]
            elif not replica:
                say.append(f"open {base}/ and log in with the key of owner 'local' in "
                           f"{keys.resolve()}")
            else:
                say.append("an API replica: make keys with `outlive keys create`")
            for line in say:
                out.print(line, highlight=False, soft_wrap=True)
            out.file.flush()

        announcer = asyncio.create_task(announce())
        try:
            await server.serve()
        finally:
            announcer.cancel()
            if metrics_server is not None:
                with contextlib.suppress(Exception):
                    await metrics_server.shutdown()
            if w is not None and worker_task is not None:
                console.print("stopping the worker (finishing or parking runs)")
                w.request_stop()
                await worker_task
            await store.close()

    tune_for_server()
    asyncio.run(go())


@app.command()
def demo(
    demo_speed: Annotated[float, typer.Option(help="Pacing of the demo model.")] = 8.0,
) -> None:
    """A tour: stream, drop and reattach, follow up, cancel. Offline; exits 0 if all held."""
    from ._tour import run_tour

    raise typer.Exit(run_tour(demo_speed))


def main() -> None:
    run_cli(app)


if __name__ == "__main__":
    main()
