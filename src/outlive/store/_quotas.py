"""Quotas (docs/quotas.md), enforced in the transaction of the write they limit: a create (the
owner's creates this minute and its queued sessions), a message (the session's history, and
the queued sessions when it queues the session again), and a claim (each owner's running
sessions: `claim_take` and `claim_candidates` skip an owner at its cap).

The server's quotas (`quotas`, set from the process's settings) apply cap by cap wherever an
owner has none of its own (`owners.quotas`)."""

from __future__ import annotations

import abc
from collections.abc import Sequence
from typing import Any

from ..domain.errors import NotFound, OutliveError
from ..domain.quotas import (
    DEFAULT_QUOTAS,
    HistoryTooLarge,
    OwnerQuotas,
    QuotaExceeded,
    Quotas,
    parse_quota_caps,
)
from ._base import Row, Tx, TxState
from ._core import StoreCore

__all__ = ["QuotaOps", "check_create", "refused_create", "text_bytes"]


def text_bytes(text: str | None) -> int:
    """What a message adds to its session's history, in bytes (UTF-8)."""
    return 0 if text is None else len(text.encode("utf-8", "surrogatepass"))


def refused_create(detail: dict[str, Any]) -> OutliveError:
    """The error of a create PostgreSQL's admission refused in its statement (`admit_create`
    raises with this detail): the one SQLite's `_admit_create` raises for the same refusal."""
    refusal, limit = str(detail.get("refusal")), int(detail.get("limit") or 0)
    if refusal == "owner_not_found":
        return NotFound(f"owner {detail.get('owner')} not found")
    if refusal == "history_bytes":
        return HistoryTooLarge(limit, 0)
    retry = detail.get("retry_after")
    return QuotaExceeded(refusal, limit, retry_after=None if retry is None else float(retry),
                         end_user=refusal.startswith("end_user_"))


def check_create(row: Row, quotas: Quotas, end_user: str | None, prompt: str | None) -> None:
    """A create's admission given its owner's counts (`row`: this minute's creates with it,
    of the owner and of its end user, and their queued sessions before it)."""
    if int(row["creates"]) > quotas.creates_per_minute:
        raise QuotaExceeded("creates_per_minute", quotas.creates_per_minute,
                            retry_after=float(row["window_left"]))
    if end_user is not None and int(row["eu_creates"]) > quotas.end_user_creates_per_minute:
        raise QuotaExceeded("end_user_creates_per_minute", quotas.end_user_creates_per_minute,
                            retry_after=float(row["eu_window_left"]), end_user=True)
    if int(row["queued"]) >= quotas.queued:
        raise QuotaExceeded("queued", quotas.queued)
    if end_user is not None and int(row["eu_queued"]) >= quotas.end_user_queued:
        raise QuotaExceeded("end_user_queued", quotas.end_user_queued, end_user=True)
    if text_bytes(prompt) > quotas.history_bytes:
        raise HistoryTooLarge(quotas.history_bytes, 0)


class QuotaOps(StoreCore):
    quotas: Quotas = DEFAULT_QUOTAS
    """The server's quotas; an owner's own caps replace them one by one."""

    _claim_rotate: str = ""
    """The owner a claim's turn starts after (the next claim moves it on)."""
    _claim_rotate_eu: str = ""
    """The end user each owner's turn of its end users starts after."""

    def _own(self, raw: Any) -> dict[str, int] | None:
        caps = None if raw is None else self.d.load_json(raw)
        return caps if isinstance(caps, dict) and caps else None

    def _effective(self, raw: Any) -> Quotas:
        return self.quotas.with_caps(self._own(raw))

    async def owner_quotas(self, owner_id: str) -> OwnerQuotas:
        """The quotas that apply to the owner, and its own caps (None: the server's)."""
        async def op(tx: Tx) -> OwnerQuotas:
            rows = await tx.fetch(self.q.owner_quotas, {"owner": owner_id})
            if not rows:
                raise NotFound(f"owner {owner_id} not found")
            raw = rows[0]["quotas"]
            return self._effective(raw), self._own(raw)

        return await self._read(op)

    async def set_owner_quotas(
        self, owner_id: str, caps: dict[str, Any] | None
    ) -> OwnerQuotas:
        """Replace the owner's own caps whole (None or {}: the server's again)."""
        own = parse_quota_caps(caps)

        async def op(tx: Tx, st: TxState) -> None:
            if not await tx.fetch(self.q.owner_exists, {"id": owner_id}):
                raise NotFound(f"owner {owner_id} not found")
            await tx.execute(self.q.set_owner_quotas, {
                "owner": owner_id, "quotas": None if own is None else self.d.json(own)})
            # a higher cap on running sessions lets waiting sessions go: tell the workers
            st.notify("", owner_id, work=True)

        await self._write(op)
        return self.quotas.with_caps(own), own

    @abc.abstractmethod
    async def _admit_create(self, tx: Tx, owner_id: str, prompt: str | None,
                            end_user: str | None) -> None:
        """The owner exists (else `NotFound`), and one more session stays within the creates
        per minute and the queued sessions of the owner and of its end user (else
        `QuotaExceeded`), its prompt within the history cap (else `HistoryTooLarge`); the
        owner's create windows bumped and locked to the COMMIT, so its creates take turns
        from here and the counts are exact. SQLite reads the counts and checks them here
        (`check_create`); PostgreSQL sends one statement that refuses by raising, with the
        rest of the create in one flush (`refused_create`)."""

    async def _admit_message(self, tx: Tx, row: Row, text: str, requeues: bool) -> int:
        """A message of `text` to the session of `row` stays within its history cap (else
        `HistoryTooLarge`) and, when it queues the session again, the queued sessions of its
        owner and its end user (else `QuotaExceeded`); returns the message's size in bytes."""
        size = text_bytes(text)
        owner = row["owner_id"]
        found = await tx.fetch(self.q.owner_quotas, {"owner": owner})
        quotas = self._effective(found[0]["quotas"] if found else None)
        had = int(row["input_bytes"] or 0)
        if had + size > quotas.history_bytes:
            raise HistoryTooLarge(quotas.history_bytes, had)
        if requeues:
            [n] = await tx.fetch(self.q.count_queued,
                                 {"owner": owner, "cap_queued": quotas.queued})
            if int(n["queued"]) >= quotas.queued:
                raise QuotaExceeded("queued", quotas.queued)
            if row["end_user"] is not None:
                [n] = await tx.fetch(self.q.count_end_user_queued, {
                    "owner": owner, "end_user": row["end_user"],
                    "cap_eu_queued": quotas.end_user_queued})
                if int(n["eu_queued"]) >= quotas.end_user_queued:
                    raise QuotaExceeded("end_user_queued", quotas.end_user_queued,
                                        end_user=True)
        return size

    def _rotate_after(self, rows: Sequence[Row], limit: int) -> None:
        """Move the claims' turn on: past the last owner this claim took from when there
        were more owners than the batch's size (the next claim goes on from there), else
        past the first (so each owner comes first in its turn); and, the same way, past the
        last end user it took from of the owner that came first."""
        fair = [r for r in rows if int(r["part"]) == 1]
        if not fair:
            return
        owners = sorted({(int(r["pos"]), str(r["owner_id"])) for r in fair})
        self._claim_rotate = (owners[-1] if len(owners) >= limit else owners[0])[1]
        first = [r for r in fair if int(r["pos"]) == owners[0][0]]
        self._claim_rotate_eu = str(max(first, key=lambda r: (r["end_user"] or "", r["id"]))
                                    ["end_user"] or "")
