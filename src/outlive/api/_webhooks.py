"""Webhook routes (docs/webhooks.md): create, list, delete an endpoint; read its delivery log.

Endpoints belong to the caller's owner; a foreign id is the same 404 as a missing one. A URL
whose host resolves to a loopback, private or link-local address is refused unless the server
runs with `--allow-private-webhooks` (the worker checks again at every delivery, since the
name may resolve elsewhere by then).
"""

from __future__ import annotations

import asyncio
import socket
from datetime import datetime
from typing import Annotated, Literal
from urllib.parse import urlsplit

from fastapi import APIRouter, Query
from pydantic import BaseModel, Field

from ..domain.errors import InvalidInput
from ..domain.webhooks import EVENTS, check_url, is_private, new_secret
from ..store import Webhook
from ._auth import CurrentOwner
from ._context import Ctx
from ._errors import error_responses

__all__ = ["router"]

router = APIRouter(prefix="/v1", tags=["webhooks"])


class CreateWebhook(BaseModel):
    url: str = Field(max_length=2000, description="An http:// or https:// URL.")
    events: list[str] = Field(min_length=1, max_length=len(EVENTS),
                              description="Any of " + ", ".join(sorted(EVENTS)) + ".")
    secret: str | None = Field(
        default=None, max_length=200,
        description="`whsec_` + base64 of 24 to 64 bytes; generated when absent.")


class WebhookOut(BaseModel):
    id: str
    url: str
    events: list[str]
    created_at: datetime | None


class CreatedWebhook(WebhookOut):
    secret: str = Field(description="Shown only here: keep it to verify signatures.")


class WebhooksOut(BaseModel):
    webhooks: list[WebhookOut]


class DeliveryOut(BaseModel):
    msg_id: str = Field(description="The `webhook-id` header, the same on every attempt.")
    session_id: str
    event: str
    state: Literal["pending", "delivered", "failed"]
    attempts: int
    last_status: int | None = Field(description="The receiver's last HTTP status, if any.")
    last_error: str | None = Field(description="Why the last attempt failed, if it did "
                                               "without a status (refused, timeout, …).")
    last_attempt_at: datetime | None
    next_attempt_at: datetime | None = Field(description="When it is tried next (pending).")
    created_at: datetime | None


class DeliveriesOut(BaseModel):
    deliveries: list[DeliveryOut]


class DeletedWebhook(BaseModel):
    deleted: Literal[True] = True


def _out(w: Webhook) -> WebhookOut:
    return WebhookOut(id=w.id, url=w.url, events=w.events, created_at=w.created_at)


async def _check_target(url: str) -> None:
    parts = urlsplit(check_url(url))
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        infos = await asyncio.get_running_loop().getaddrinfo(
            parts.hostname, port, type=socket.SOCK_STREAM)
    except (OSError, ValueError) as exc:  # ValueError: a name IDNA cannot encode
        raise InvalidInput(f"the webhook host {parts.hostname!r} does not resolve") from exc
    if is_private(str(info[4][0]) for info in infos):
        raise InvalidInput("the webhook URL resolves to a loopback, private or link-local "
                           "address; the server refuses those unless started with "
                           "--allow-private-webhooks")


@router.post(
    "/webhooks", status_code=201, response_model=CreatedWebhook,
    responses=error_responses(400, 401, 422),
    summary="Register a webhook endpoint for some session events (its secret is shown once)",
)
async def create_webhook(body: CreateWebhook, owner: CurrentOwner, ctx: Ctx) -> CreatedWebhook:
    if not ctx.settings.allow_private_webhooks:
        await _check_target(body.url)
    secret = body.secret or new_secret()
    w = await ctx.store.create_webhook(owner.id, url=body.url, events=body.events,
                                       secret=secret)
    return CreatedWebhook(**_out(w).model_dump(), secret=secret)


@router.get("/webhooks", response_model=WebhooksOut, responses=error_responses(401),
            summary="List the owner's webhook endpoints")
async def list_webhooks(owner: CurrentOwner, ctx: Ctx) -> WebhooksOut:
    return WebhooksOut(webhooks=[_out(w) for w in await ctx.store.list_webhooks(owner.id)])


@router.delete("/webhooks/{webhook_id}", response_model=DeletedWebhook,
               responses=error_responses(401, 404, 422),
               summary="Delete a webhook endpoint and its delivery log")
async def delete_webhook(webhook_id: str, owner: CurrentOwner, ctx: Ctx) -> DeletedWebhook:
    await ctx.store.delete_webhook(owner.id, webhook_id)
    return DeletedWebhook()


@router.get("/webhooks/{webhook_id}/deliveries", response_model=DeliveriesOut,
            responses=error_responses(401, 404, 422),
            summary="The endpoint's delivery log, newest first")
async def list_deliveries(
    webhook_id: str, owner: CurrentOwner, ctx: Ctx,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> DeliveriesOut:
    rows = await ctx.store.list_deliveries(owner.id, webhook_id, limit=limit)
    return DeliveriesOut(deliveries=[
        DeliveryOut(msg_id=d.msg_id, session_id=d.session_id, event=d.event,
                    state=d.state,  # type: ignore[arg-type]
                    attempts=d.attempts, last_status=d.last_status, last_error=d.last_error,
                    last_attempt_at=d.last_attempt_at, next_attempt_at=d.next_attempt_at,
                    created_at=d.created_at)
        for d in rows
    ])
