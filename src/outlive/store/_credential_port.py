"""Who a request is (beside the other ports in `_port.py`): an API key's owner, the web page's
logins made from a key, and what checks a browser token (docs/end-users.md): the key that
minted it still live, and the server key that signs it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from ..domain.secret_box import SecretBox

__all__ = ["CredentialStore", "Owner"]


@dataclass(frozen=True)
class Owner:
    id: str
    name: str


class CredentialStore(Protocol):
    """Who a request is: an API key's owner, and the web page's logins made from a key."""

    async def owner_for_key(self, key_hash: str) -> Owner | None: ...
    async def key_for_hash(self, key_hash: str) -> tuple[str, Owner] | None:
        """The live key with this hash: its id (what a browser token names) and owner."""
        ...
    async def owner_for_key_id(self, key_id: str) -> Owner | None:
        """The owner of the key with this id while it is live (None once revoked)."""
        ...
    async def create_login(self, key_hash: str, token_hash: str, *, max_age: float
                           ) -> Owner | None: ...
    async def owner_for_login(self, token_hash: str, *, idle: float, max_age: float
                              ) -> Owner | None: ...
    async def end_login(self, token_hash: str) -> bool: ...
    @property
    def secret_box(self) -> SecretBox | None:
        """The server key ring (webhook secrets, browser tokens); None: opened without."""
        ...
