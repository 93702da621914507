"""The webhook outbox a lifecycle write fills (docs/webhooks.md), in that write's own
transaction: `_apply` and the group commit's plain ends both queue it. A base of
`StoreCore`, kept apart so the core stays about the row and its logs."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..domain.model import TERMINAL, new_id
from ..domain.status import Lifecycle
from ..domain.webhooks import ATTENTION_EVENT, ended_event, payload
from ._base import Row, Tx
from ._queries import Queries

__all__ = ["Outbox"]


class Outbox:
    q: Queries

    async def _webhook_outbox(
        self, tx: Tx, row: Row, new: Lifecycle, extra: Mapping[str, Any]
    ) -> None:
        """The webhooks a lifecycle write reports (an end, a change of `attention`), queued
        in its own transaction: every change of the row goes through `_apply`, so none is
        missed and none is reported that did not commit. A row read by `lock_session` (or
        `lock_sessions`) says whether the owner has any endpoint: with none, no statement."""
        if not row.get("has_webhooks", True):
            return
        before = row["attention"]
        changed = new.status.value != row["status"]
        after = extra["attention"] if "attention" in extra else (None if changed else before)
        if changed and new.status in TERMINAL:
            data: dict[str, Any] = {"status": new.status.value, "attempt": new.attempt}
            if extra.get("error_code") is not None:
                data["error"] = {"code": extra["error_code"],
                                 "message": extra.get("error_message") or ""}
            if after is not None:
                data["attention"] = after
            await self._enqueue_webhook(tx, row, ended_event(new.status), data)
        if after != before:
            await self._enqueue_webhook(
                tx, row, ATTENTION_EVENT,
                {"attention": after, "previous": before, "status": new.status.value})

    async def _enqueue_webhook(self, tx: Tx, row: Row, event: str, data: dict[str, Any]
                               ) -> None:
        await tx.execute(self.q.enqueue_webhooks, {
            "msg": new_id("msg"), "sid": row["id"], "event": event, "owner": row["owner_id"],
            "body": payload(event, row["id"], data), "pattern": f"%,{event},%",
        })
