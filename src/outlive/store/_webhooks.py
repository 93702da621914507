"""Webhooks: an owner's endpoints, their delivery log, and the outbox a worker drains.

Outbox rows are written by `_apply` (in `_core.py`) in the transaction of the change they
report. A worker takes due rows (`SKIP LOCKED` on PostgreSQL), which counts the attempt and
pushes the row's time past a lease; it records the outcome fenced by that attempt number.
A taker that dies leaves the row due again when its lease ends: at-least-once, and the
`msg_id` (the `webhook-id` header) stays the same on every attempt.

Signing secrets are stored sealed (`domain.secret_box`) by the `SecretBox` the store was
opened with, the row's id bound in: a copy of the database holds none of them usable. Rows
written before sealing existed (plain `whsec_…`) are sealed by `seal_webhook_secrets`, which
`open_store` runs at every start; until then a delivery uses them as they are.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from ..domain.errors import InvalidInput, NotFound
from ..domain.model import new_id
from ..domain.secret_box import SecretBox, SecretKeyMissing, key_of, missing_message
from ..domain.webhooks import SECRET_PREFIX, check_events, check_secret, check_url
from ._base import Row, Tx, TxState
from ._core import StoreCore
from ._webhook_ports import SealReport, TakenDelivery, Webhook, WebhookDelivery

__all__ = ["WebhookOps"]

_MAX_PER_OWNER = 50


class WebhookOps(StoreCore):
    _secret_box: SecretBox | None = None
    """Seals and opens the signing secrets; set by the adapter from `open_store(secrets=…)`.
    Without one the store can neither write nor read a secret (it says so)."""

    @property
    def secret_box(self) -> SecretBox | None:
        """The server key ring this store was opened with (it also signs browser tokens)."""
        return self._secret_box

    def _box(self) -> SecretBox:
        if self._secret_box is None:
            raise SecretKeyMissing("this store was opened without a secret key, so it cannot "
                                   "seal or open webhook secrets (open_store(…, secrets=…))")
        return self._secret_box

    def _open_secret(self, stored: str, webhook_id: str) -> str:
        """The secret to sign with; a plain one (written before sealing) as it is."""
        if stored.startswith(SECRET_PREFIX):
            return stored
        return self._box().open(stored, webhook_id)

    def _webhook(self, row: Row) -> Webhook:
        events = [e for e in row["events"].split(",") if e]
        return Webhook(row["id"], row["url"], events, self.d.ts(row["created_at"]))

    async def create_webhook(
        self, owner_id: str, *, url: str, events: list[str], secret: str
    ) -> Webhook:
        """`secret` is stored sealed (the delivery signs with it); the API shows it once."""
        clean = check_events(events)
        check_url(url)
        check_secret(secret)
        wid = new_id("wh")
        sealed = self._box().seal(secret, wid)

        async def op(tx: Tx, st: TxState) -> Webhook:
            if not await tx.fetch(self.q.lock_owner, {"id": owner_id}):
                raise NotFound(f"owner {owner_id} not found")
            if len(await tx.fetch(self.q.list_webhooks, {"owner": owner_id})) >= _MAX_PER_OWNER:
                raise InvalidInput(f"an owner has at most {_MAX_PER_OWNER} webhooks")
            await tx.execute(self.q.insert_webhook, {
                "id": wid, "owner": owner_id, "url": url, "secret": sealed,
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
                secret = self._open_secret(r["secret"], r["webhook_id"])
                out.append(TakenDelivery(r["webhook_id"], r["msg_id"], r["url"], secret,
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

    async def seal_webhook_secrets(self, *, rekey: bool = False,
                                   batch: int = 200) -> SealReport:
        """Seal every plain secret with the current key; with `rekey`, also move every row
        sealed with an older key of the ring to the current one (`outlive secrets rotate`).
        First a read-only pass: a row under a key this store was not given raises
        `SecretKeyMissing` before anything is written (sealing the plain rows with the wrong
        key would lock them away from the processes that have the right one). Then one write
        transaction per `batch` rows, each change fenced on the value read, so a run cut
        halfway leaves every row readable and running it again finishes it."""
        box = self._box()
        missing: set[str] = set()
        after = ""
        while rows := await self._secret_page(after, batch):
            after = rows[-1]["id"]
            missing |= {kid for row in rows
                        if (kid := self._foreign_key(box, row["secret"])) is not None}
        if missing:
            raise SecretKeyMissing(missing_message(sorted(missing), box.hint),
                                   key_ids=sorted(missing))
        sealed = resealed = kept = 0
        after = ""
        while rows := await self._secret_page(after, batch):
            after = rows[-1]["id"]
            changes: list[dict[str, Any]] = []
            for row in rows:
                stored, wid = row["secret"], row["id"]
                kid = key_of(stored)
                if stored.startswith(SECRET_PREFIX):
                    plain, sealed = stored, sealed + 1
                elif kid is not None and kid != box.current and rekey and box.knows(kid):
                    plain, resealed = box.open(stored, wid), resealed + 1
                else:
                    kept += 1
                    continue
                changes.append({"id": wid, "old": stored, "secret": box.seal(plain, wid)})
            if changes:
                await self._write(self._reseal(changes))
        return SealReport(box.current, sealed, resealed, kept)

    @staticmethod
    def _foreign_key(box: SecretBox, stored: str) -> str | None:
        """The key id of a row this box cannot open ('?' for a form it does not know)."""
        if stored.startswith(SECRET_PREFIX):
            return None
        kid = key_of(stored)
        if kid is None:
            return "?"
        return None if box.knows(kid) else kid

    async def _secret_page(self, after: str, batch: int) -> list[Row]:
        async def op(tx: Tx) -> list[Row]:
            return await tx.fetch(self.q.webhook_secrets_page, {"after_id": after,
                                                                "limit": batch})

        return await self._read(op)

    def _reseal(self, changes: list[dict[str, Any]]
                ) -> Callable[[Tx, TxState], Awaitable[None]]:
        async def op(tx: Tx, st: TxState) -> None:
            for change in changes:
                await tx.execute(self.q.reseal_webhook_secret, change)

        return op
