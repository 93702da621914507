"""Webhooks: an owner's endpoints, their delivery log, and the outbox a worker drains.

Outbox rows are written by `_apply` (in `_core.py`) in the transaction of the change they
report. A worker takes due rows (`SKIP LOCKED` on PostgreSQL), which counts the attempt and
pushes the row's time past a lease; it records the outcome fenced by that attempt number.
A taker that dies leaves the row due again when its lease ends: at-least-once, and the
`msg_id` (the `webhook-id` header) stays the same on every attempt.
"""

from __future__ import annotations

from typing import Any

from ..domain.errors import InvalidInput, NotFound
from ..domain.model import new_id
from ..domain.webhooks import check_events, check_secret, check_url
from ._base import Row, Tx, TxState
from ._core import StoreCore
from ._webhook_ports import TakenDelivery, Webhook, WebhookDelivery

__all__ = ["WebhookOps"]

_MAX_PER_OWNER = 50


class WebhookOps(StoreCore):
    def _webhook(self, row: Row) -> Webhook:
        events = [e for e in row["events"].split(",") if e]
        return Webhook(row["id"], row["url"], events, self.d.ts(row["created_at"]))

    async def create_webhook(
        self, owner_id: str, *, url: str, events: list[str], secret: str
    ) -> Webhook:
        """`secret` is stored as given (the delivery signs with it); the API shows it once."""
        clean = check_events(events)
        check_url(url)
        check_secret(secret)
        wid = new_id("wh")

        async def op(tx: Tx, st: TxState) -> Webhook:
            if not await tx.fetch(self.q.lock_owner, {"id": owner_id}):
                raise NotFound(f"owner {owner_id} not found")
            if len(await tx.fetch(self.q.list_webhooks, {"owner": owner_id})) >= _MAX_PER_OWNER:
                raise InvalidInput(f"an owner has at most {_MAX_PER_OWNER} webhooks")
            await tx.execute(self.q.insert_webhook, {
                "id": wid, "owner": owner_id, "url": url, "secret": secret,
                "events": "," + ",".join(clean) + ",",
            })
            rows = await tx.fetch(self.q.get_owned_webhook, {"id": wid, "owner": owner_id})
            return self._webhook(rows[0])

        return await self._write(op)

    async def list_webhooks(self, owner_id: str) -> list[Webhook]:
        async def op(tx: Tx) -> list[Webhook]:
            rows = await tx.fetch(self.q.list_webhooks, {"owner": owner_id})
            return [self._webhook(r) for r in rows]

        return await self._read(op)

    async def delete_webhook(self, owner_id: str, webhook_id: str) -> None:
        """Deletes the endpoint and its delivery log; a foreign id is just not found."""
        async def op(tx: Tx, st: TxState) -> None:
            if not await tx.fetch(self.q.get_owned_webhook,
                                  {"id": webhook_id, "owner": owner_id}):
                raise NotFound(f"webhook {webhook_id} not found")
            await tx.execute(self.q.delete_webhook, {"id": webhook_id})

        await self._write(op)

    async def list_deliveries(
        self, owner_id: str, webhook_id: str, *, limit: int = 100
    ) -> list[WebhookDelivery]:
        """Newest first: what was sent, how many attempts, the last answer, the next try."""
        if not 1 <= limit <= 1000:
            raise InvalidInput("limit must be between 1 and 1000")

        async def op(tx: Tx) -> list[WebhookDelivery]:
            if not await tx.fetch(self.q.get_owned_webhook,
                                  {"id": webhook_id, "owner": owner_id}):
                raise NotFound(f"webhook {webhook_id} not found")
            rows = await tx.fetch(self.q.list_deliveries, {"id": webhook_id, "limit": limit})
            return [
                WebhookDelivery(
                    msg_id=r["msg_id"], session_id=r["session_id"], event=r["event"],
                    state=r["state"], attempts=int(r["attempts"]),
                    last_status=None if r["last_status"] is None else int(r["last_status"]),
                    last_error=r["last_error"], last_attempt_at=self.d.ts(r["last_attempt_at"]),
                    next_attempt_at=self.d.ts(r["next_attempt_at"]),
                    created_at=self.d.ts(r["created_at"]),
                )
                for r in rows
            ]

        return await self._read(op)

    async def take_deliveries(self, *, limit: int, lease: float) -> list[TakenDelivery]:
        """Due deliveries for this worker to send within `lease` seconds."""
        async def any_due(tx: Tx) -> bool:
            return bool(await tx.fetch(self.q.any_due_delivery))

        if not await self._read(any_due):
            return []

        async def op(tx: Tx, st: TxState) -> list[TakenDelivery]:
            due = await tx.fetch(self.q.due_deliveries, {"limit": limit})
            out: list[TakenDelivery] = []
            for d in due:
                key: dict[str, Any] = {"wid": d["webhook_id"], "msg": d["msg_id"]}
                await tx.execute(self.q.take_delivery, {**key, "lease": lease})
                r = (await tx.fetch(self.q.taken_delivery, key))[0]
                out.append(TakenDelivery(r["webhook_id"], r["msg_id"], r["url"], r["secret"],
                                         r["body"], int(r["attempts"]), r["traceparent"]))
            return out

        return await self._write(op)

    async def record_delivery(
        self, taken: TakenDelivery, *, state: str, status: int | None = None,
        error: str | None = None, retry_in: float | None = None,
    ) -> None:
        """`state` 'pending' (retry in `retry_in` s), 'delivered' or 'failed' (gave up). A
        taker overtaken after its lease ran out records nothing."""
        if state not in ("pending", "delivered", "failed"):
            raise InvalidInput(f"unknown delivery state {state!r}")
        params: dict[str, Any] = {"wid": taken.webhook_id, "msg": taken.msg_id,
                                  "attempt": taken.attempt, "status": status,
                                  "error": None if error is None else error[:500]}

        async def op(tx: Tx, st: TxState) -> None:
            if state == "pending":
                await tx.execute(self.q.delivery_retry, {**params, "delay": retry_in or 0.0})
            else:
                await tx.execute(self.q.delivery_final, {**params, "outcome": state})

        await self._write(op)
