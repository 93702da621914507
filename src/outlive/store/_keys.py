"""Owners and API keys. Only a key's hash is ever stored."""

from __future__ import annotations

import abc
from collections.abc import Awaitable, Callable
from typing import TypeVar

from ..domain.errors import InvalidInput
from ..domain.model import new_id
from ._base import Dialect, Tx, TxState
from ._port import ApiKey, Owner

__all__ = ["KeyOps"]

T = TypeVar("T")


class KeyOps(abc.ABC):
    d: Dialect

    @abc.abstractmethod
    async def _write(self, fn: Callable[[Tx, TxState], Awaitable[T]]) -> T: ...

    @abc.abstractmethod
    async def _read(self, fn: Callable[[Tx], Awaitable[T]]) -> T: ...

    async def ensure_owner(self, name: str) -> Owner:
        """Return the owner with this name, creating it on first use."""
        if not name or len(name) > 100:
            raise InvalidInput("owner name must be 1 to 100 characters")

        async def op(tx: Tx, st: TxState) -> Owner:
            await tx.execute(
                "INSERT INTO owners (id, name, created_at) VALUES (:id, :name, "
                f"{self.d.now}) ON CONFLICT (name) DO NOTHING",
                {"id": new_id("own"), "name": name},
            )
            rows = await tx.fetch("SELECT id, name FROM owners WHERE name = :name",
                                  {"name": name})
            return Owner(rows[0]["id"], rows[0]["name"])

        return await self._write(op)

    async def create_api_key(self, owner_id: str, key_hash: str, label: str | None) -> str:
        key_id = new_id("key")

        async def op(tx: Tx, st: TxState) -> str:
            await tx.execute(
                "INSERT INTO api_keys (id, owner_id, key_hash, label, created_at) "
                f"VALUES (:id, :owner, :hash, :label, {self.d.now})",
                {"id": key_id, "owner": owner_id, "hash": key_hash, "label": label},
            )
            return key_id

        return await self._write(op)

    async def owner_for_key(self, key_hash: str) -> Owner | None:
        async def op(tx: Tx) -> Owner | None:
            rows = await tx.fetch(
                "SELECT o.id, o.name FROM api_keys k JOIN owners o ON o.id = k.owner_id "
                "WHERE k.key_hash = :hash AND k.revoked_at IS NULL",
                {"hash": key_hash},
            )
            return Owner(rows[0]["id"], rows[0]["name"]) if rows else None

        return await self._read(op)

    async def list_api_keys(self) -> list[ApiKey]:
        async def op(tx: Tx) -> list[ApiKey]:
            rows = await tx.fetch(
                "SELECT k.id, k.owner_id, o.name AS owner_name, k.label, k.created_at, "
                "k.revoked_at FROM api_keys k JOIN owners o ON o.id = k.owner_id ORDER BY k.id"
            )
            return [
                ApiKey(r["id"], r["owner_id"], r["owner_name"], r["label"],
                       self.d.ts(r["created_at"]), r["revoked_at"] is not None)
                for r in rows
            ]

        return await self._read(op)

    async def revoke_api_key(self, key_id: str) -> bool:
        async def op(tx: Tx, st: TxState) -> bool:
            rows = await tx.fetch(
                f"UPDATE api_keys SET revoked_at = {self.d.now} WHERE id = :id "
                "AND revoked_at IS NULL RETURNING id",
                {"id": key_id},
            )
            return bool(rows)

        return await self._write(op)
