"""Owners and API keys. Only a key's hash is ever stored."""

from __future__ import annotations

from ..domain.model import new_id
from ._base import Tx, TxState
from ._core import StoreCore
from ._port import ApiKey, Owner
from ._validation import check_owner_name

__all__ = ["KeyOps"]


class KeyOps(StoreCore):
    async def ensure_owner(self, name: str) -> Owner:
        """Return the owner with this name, creating it on first use."""
        check_owner_name(name)

        async def op(tx: Tx, st: TxState) -> Owner:
            await tx.execute(self.q.insert_owner, {"id": new_id("own"), "name": name})
            rows = await tx.fetch(self.q.owner_by_name, {"name": name})
            return Owner(rows[0]["id"], rows[0]["name"])

        return await self._write(op)

    async def create_api_key(self, owner_id: str, key_hash: str, label: str | None) -> str:
        key_id = new_id("key")

        async def op(tx: Tx, st: TxState) -> str:
            await tx.execute(self.q.insert_api_key,
                             {"id": key_id, "owner": owner_id, "hash": key_hash, "label": label})
            return key_id

        return await self._write(op)

    async def owner_for_key(self, key_hash: str) -> Owner | None:
        async def op(tx: Tx) -> Owner | None:
            rows = await tx.fetch(self.q.owner_for_key, {"hash": key_hash})
            return Owner(rows[0]["id"], rows[0]["name"]) if rows else None

        return await self._read(op)

    async def list_api_keys(self) -> list[ApiKey]:
        async def op(tx: Tx) -> list[ApiKey]:
            rows = await tx.fetch(self.q.list_api_keys)
            return [
                ApiKey(r["id"], r["owner_id"], r["owner_name"], r["label"],
                       self.d.ts(r["created_at"]), r["revoked_at"] is not None)
                for r in rows
            ]

        return await self._read(op)

    async def revoke_api_key(self, key_id: str) -> bool:
        async def op(tx: Tx, st: TxState) -> bool:
            return bool(await tx.fetch(self.q.revoke_api_key, {"id": key_id}))

        return await self._write(op)
