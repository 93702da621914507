"""Owners, API keys and the web page's logins. Only hashes are ever stored: a key's, and a
login token's (a random value unrelated to the key, so a copy of the database logs no one in).
"""

from __future__ import annotations

import math

from ..domain.errors import InvalidInput, NotFound
from ..domain.model import new_id
from ._base import Row, Tx, TxState
from ._core import StoreCore
from ._port import ApiKey, Owner, OwnerSettings
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

    async def key_for_hash(self, key_hash: str) -> tuple[str, Owner] | None:
        async def op(tx: Tx) -> tuple[str, Owner] | None:
            rows = await tx.fetch(self.q.active_key, {"hash": key_hash})
            return (rows[0]["id"], Owner(rows[0]["owner_id"], rows[0]["name"])) if rows else None

        return await self._read(op)

    async def owner_for_key_id(self, key_id: str) -> Owner | None:
        async def op(tx: Tx) -> Owner | None:
            rows = await tx.fetch(self.q.owner_for_key_id, {"id": key_id})
            return Owner(rows[0]["id"], rows[0]["name"]) if rows else None

        return await self._read(op)

    async def list_owners(self) -> list[OwnerSettings]:
        async def op(tx: Tx) -> list[OwnerSettings]:
            return [_settings(r) for r in await tx.fetch(self.q.list_owners)]

        return await self._read(op)

    async def set_owner_retention(self, name: str, retain: float | None) -> OwnerSettings:
        """Give the owner its own retention in seconds (`math.inf`: keep forever), or back
        the server's (None); the storage sweep purges its finished sessions by it."""
        if retain is not None and not (retain >= 0):
            raise InvalidInput("retention must be a positive number of seconds")
        secs = None if retain is None else -1.0 if math.isinf(retain) else float(retain)

        async def op(tx: Tx, st: TxState) -> OwnerSettings:
            rows = await tx.fetch(self.q.set_owner_retention, {"secs": secs, "name": name})
            if not rows:
                raise NotFound(f"owner {name} not found")
            return _settings(rows[0])

        return await self._write(op)

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
        """Revoke the key and end every login made with it, in one transaction."""

        async def op(tx: Tx, st: TxState) -> bool:
            revoked = bool(await tx.fetch(self.q.revoke_api_key, {"id": key_id}))
            if revoked:
                await tx.execute(self.q.revoke_key_logins, {"id": key_id})
            return revoked

        return await self._write(op)

    async def create_login(self, key_hash: str, token_hash: str, *, max_age: float
                           ) -> Owner | None:
        """Start a login for the active key with this hash; None when there is none. Logins
        past `max_age` or ended are deleted on the way (the table stays small)."""

        async def op(tx: Tx, st: TxState) -> Owner | None:
            rows = await tx.fetch(self.q.active_key, {"hash": key_hash})
            if not rows:
                return None
            await tx.execute(self.q.purge_logins, {"max_age": max_age})
            await tx.execute(self.q.insert_login, {
                "id": new_id("lgn"), "token": token_hash, "key": rows[0]["id"],
                "owner": rows[0]["owner_id"],
            })
            return Owner(rows[0]["owner_id"], rows[0]["name"])

        return await self._write(op)

    async def owner_for_login(self, token_hash: str, *, idle: float, max_age: float
                              ) -> Owner | None:
        """The owner of a live login, sliding its idle expiry; None when the login is unknown,
        ended, idle longer than `idle`, older than `max_age`, or its key was revoked."""

        async def op(tx: Tx, st: TxState) -> Owner | None:
            rows = await tx.fetch(self.q.touch_login,
                                  {"token": token_hash, "idle": idle, "max_age": max_age})
            if not rows:
                return None
            owner = await tx.fetch(self.q.owner_by_id, {"id": rows[0]["owner_id"]})
            return Owner(owner[0]["id"], owner[0]["name"])

        return await self._write(op)

    async def end_login(self, token_hash: str) -> bool:
        async def op(tx: Tx, st: TxState) -> bool:
            return bool(await tx.fetch(self.q.end_login, {"token": token_hash}))

        return await self._write(op)


def _settings(row: Row) -> OwnerSettings:
    secs = row["retain_seconds"]
    retain = None if secs is None else math.inf if float(secs) < 0 else float(secs)
    return OwnerSettings(row["id"], row["name"], retain)
