"""The webhook ports (docs/webhooks.md): an owner's endpoints and their log, and the outbox
as a worker sends it; part of the Store ports (`_port`)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

__all__ = ["DeliveryStore", "SealReport", "TakenDelivery", "Webhook", "WebhookDelivery",
           "WebhookStore"]


@dataclass(frozen=True)
class Webhook:
    """An owner's endpoint (its secret is never read back: it was shown once, at creation)."""

    id: str
    url: str
    events: list[str]
    created_at: datetime | None


@dataclass(frozen=True)
class WebhookDelivery:
    """One event for one endpoint, as its delivery log shows it."""

    msg_id: str
    session_id: str
    event: str
    state: str
    attempts: int
    last_status: int | None
    last_error: str | None
    last_attempt_at: datetime | None
    next_attempt_at: datetime | None
    created_at: datetime | None


@dataclass(frozen=True)
class TakenDelivery:
    """A delivery a worker took to send: `attempt` fences the outcome it records."""

    webhook_id: str
    msg_id: str
    url: str
    secret: str
    body: str
    attempt: int
    traceparent: str | None = None
    """The W3C context of the session's last run, which the delivery's span continues."""


@dataclass(frozen=True)
class SealReport:
    """What one `seal_webhook_secrets` did: rows sealed from plain text, rows moved to the
    current key (a rotation), rows left as they were; `key_id` is the current key's."""

    key_id: str
    sealed: int
    resealed: int
    kept: int


class WebhookStore(Protocol):
    """An owner's webhook endpoints and their delivery log (docs/webhooks.md)."""

    async def create_webhook(
        self, owner_id: str, *, url: str, events: list[str], secret: str
    ) -> Webhook: ...
    async def list_webhooks(self, owner_id: str) -> list[Webhook]: ...
    async def delete_webhook(self, owner_id: str, webhook_id: str) -> None: ...
    async def list_deliveries(
        self, owner_id: str, webhook_id: str, *, limit: int = 100
    ) -> list[WebhookDelivery]: ...


class DeliveryStore(Protocol):
    """The webhook outbox as a worker sends it: take due deliveries, record each outcome."""

    async def take_deliveries(self, *, limit: int, lease: float) -> list[TakenDelivery]: ...
    async def record_delivery(
        self, taken: TakenDelivery, *, state: str, status: int | None = None,
        error: str | None = None, retry_in: float | None = None,
    ) -> None: ...
