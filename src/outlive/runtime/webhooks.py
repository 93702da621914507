"""Webhook delivery: a worker's loop that drains the outbox (docs/webhooks.md).

Each pass takes the due deliveries (a lease: a taker that dies leaves them due again when it
ends), POSTs them concurrently, signed the Standard Webhooks way, and records each outcome:
a 2xx is delivered; anything else is retried after an exponential backoff with a cap, and
given up (`failed`) after `webhook_attempts` attempts. The message id is fixed when the event
is written, so every retry, by any worker, carries the same `webhook-id`. Targets that
resolve to loopback, private or link-local addresses are refused unless allowed, on the
addresses the connection is made to (`webhook_transport`: one resolution, no rebinding); a
host that does not resolve is not connected to and is tried again later. Logs and traces
show a target's scheme and host only (`redacted`).
"""

from __future__ import annotations

import asyncio
import logging
import random
import time

import httpx

from .. import tracing
from ..domain.webhooks import redacted, signature_headers
from ..store import DeliveryStore, TakenDelivery
from .settings import RuntimeSettings
from .webhook_transport import RefusedTarget, pinned_transport

__all__ = ["WebhookSender", "backoff"]

log = logging.getLogger("outlive.webhooks")

_BATCH = 20


def backoff(attempt: int, settings: RuntimeSettings) -> float:
    """Seconds before the attempt after `attempt` (1-based): base·2^(n-1), capped, ±10 %."""
    delay = min(settings.webhook_backoff * 2.0 ** (attempt - 1), settings.webhook_backoff_max)
    return delay * (0.9 + 0.2 * random.random())


class WebhookSender:
    def __init__(self, store: DeliveryStore, settings: RuntimeSettings) -> None:
        self.store = store
        self.settings = settings
        self.lease = 2 * settings.webhook_timeout + 1.0
        """A taken delivery is due again after this long if its taker did not record it."""

    async def run(self) -> None:
        """Poll the outbox until cancelled; a full batch is followed at once by the next."""
        transport = pinned_transport(allow_private=self.settings.allow_private_webhooks)
        async with httpx.AsyncClient(timeout=self.settings.webhook_timeout,
                                     follow_redirects=False, transport=transport,
                                     trust_env=False) as client:
            while True:
                try:
                    n = await self.pass_once(client)
                except Exception as exc:
                    log.warning("webhook pass failed: %s", exc)
                    n = 0
                if n < _BATCH:
                    await asyncio.sleep(self.settings.webhook_interval)

    async def pass_once(self, client: httpx.AsyncClient) -> int:
        taken = await self.store.take_deliveries(limit=_BATCH, lease=self.lease)
        if taken:
            await asyncio.gather(*(self._deliver(client, t) for t in taken))
        return len(taken)

    async def _deliver(self, client: httpx.AsyncClient, t: TakenDelivery) -> None:
        status: int | None = None
        error: str | None = None
        headers = signature_headers(t.secret, t.msg_id, int(time.time()), t.body)
        # Tracing on: a span in the trace of the run that made the change, passed on.
        with tracing.webhook_span(t.traceparent, redacted(t.url)) as span:
            tracing.inject(headers)
            try:
                response = await client.post(t.url, content=t.body.encode(), headers=headers)
                status = response.status_code
            except httpx.HTTPError as exc:
                refused = exc.__cause__
                if isinstance(refused, RefusedTarget) and str(refused).startswith("refused"):
                    span.failed("RefusedTarget", str(refused))
                    await self.store.record_delivery(t, state="failed", error=str(refused))
                    return
                error = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
                span.failed(type(exc).__name__, error)
            span.set("http.response.status_code", status)
            if status is not None and status >= 400:
                span.failed(str(status))
        if status is not None and 200 <= status < 300:
            await self.store.record_delivery(t, state="delivered", status=status)
        elif t.attempt >= self.settings.webhook_attempts:
            log.warning("webhook %s to %s: giving up after %d attempts", t.msg_id,
                        redacted(t.url), t.attempt)
            await self.store.record_delivery(t, state="failed", status=status, error=error)
        else:
            await self.store.record_delivery(t, state="pending", status=status, error=error,
                                             retry_in=backoff(t.attempt, self.settings))
