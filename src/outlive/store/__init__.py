"""The Store ports and their two adapters. `open_store(url)` picks one from a database URL."""

from __future__ import annotations

from ..domain.errors import InvalidInput
from ..domain.secret_box import SecretBox
from ._port import (
    PORTS,
    AdmissionStore,
    ApiKey,
    ApiStore,
    ApprovalStore,
    BudgetStore,
    ChildStore,
    ClientCallStore,
    ClientResultStore,
    Commit,
    CommitOutcome,
    ConnectionStore,
    CredentialStore,
    DeliveryStore,
    EventLogStore,
    FireReport,
    FiringStore,
    ForkStore,
    HealthStore,
    Held,
    Notice,
    Owner,
    OwnerSettings,
    OwnerStore,
    RetentionStore,
    RunnerStore,
    RunStore,
    Schedule,
    ScheduledMessage,
    ScheduleRun,
    ScheduleStore,
    SealReport,
    SessionStore,
    Settle,
    SettleOutcome,
    Store,
    Subscription,
    TakenDelivery,
    Webhook,
    WebhookDelivery,
    WebhookStore,
    WorkerStore,
)
from ._validation import (
    MAX_ABANDON_AFTER,
    MAX_END_USER,
    MIN_ABANDON_AFTER,
    check_end_user,
    check_metadata,
    check_string,
    check_title,
)
from .postgres import PostgresStore
from .sqlite import SqliteStore

__all__ = [
    "MAX_ABANDON_AFTER",
    "MAX_END_USER",
    "MIN_ABANDON_AFTER",
    "PORTS",
    "AdmissionStore",
    "ApiKey",
    "ApiStore",
    "ApprovalStore",
    "BudgetStore",
    "ChildStore",
    "ClientCallStore",
    "ClientResultStore",
    "Commit",
    "CommitOutcome",
    "ConnectionStore",
    "CredentialStore",
    "DeliveryStore",
    "EventLogStore",
    "FireReport",
    "FiringStore",
    "ForkStore",
    "HealthStore",
    "Held",
    "Notice",
    "Owner",
    "OwnerSettings",
    "OwnerStore",
    "PostgresStore",
    "RetentionStore",
    "RunStore",
    "RunnerStore",
    "Schedule",
    "ScheduleRun",
    "ScheduleStore",
    "ScheduledMessage",
    "SealReport",
    "SessionStore",
    "Settle",
    "SettleOutcome",
    "SqliteStore",
    "Store",
    "Subscription",
    "TakenDelivery",
    "Webhook",
    "WebhookDelivery",
    "WebhookStore",
    "WorkerStore",
    "check_end_user",
    "check_metadata",
    "check_string",
    "check_title",
    "open_store",
]


async def open_store(
    url: str, *, migrate: bool = True, listen_url: str | None = None,
    secrets: SecretBox | None = None,
) -> PostgresStore | SqliteStore:
    """`sqlite:///path.db` (the embedded default) or `postgresql://…`; migrates on open.
    `listen_url`: PostgreSQL only, a direct connection for LISTEN when `url` is a pooler.
    `secrets`: the keyring for webhook secrets; with `migrate`, plain secrets left by older
    versions are sealed now, and a secret under a key the ring lacks fails the open (at
    start, not at the first delivery)."""
    store: PostgresStore | SqliteStore
    if url.startswith(("postgresql://", "postgres://")) or _is_keyword_dsn(url):
        store = await PostgresStore(url, listen_dsn=listen_url, secrets=secrets).open()
    elif url.startswith("sqlite:") or "://" not in url:
        store = await SqliteStore.from_url(url, secrets=secrets).open()
    else:
        scheme = url.split("://", 1)[0]
        raise InvalidInput(
            f"unsupported database URL scheme {scheme!r}; use sqlite:///path.db or postgresql://…"
        )
    if migrate:
        try:
            await store.migrate()
            if secrets is not None:
                await store.seal_webhook_secrets()
        except BaseException:
            await store.close()
            raise
    return store


def _is_keyword_dsn(url: str) -> bool:
    """libpq's `host=… dbname=…` form is PostgreSQL too, never a file name."""
    return "://" not in url and "=" in url and any(
        part.split("=", 1)[0] in ("host", "dbname", "user", "port", "password")
        for part in url.split()
    )
