"""Secrets sealed at rest (webhook signing secrets): the stored form and the AEAD, pure.

A copy of the database must hold no usable credential (docs/security.md), so a secret the
server has to use again (to sign) is kept encrypted with a server key that lives outside the
database: AES-256-GCM, a random 96-bit nonce per seal, and the row's id as associated data
(a ciphertext copied onto another row does not open). The stored form names its key:
`enc:v1:<key id>:<base64url(nonce + ciphertext)>`, `<key id>` a short fingerprint of the
key, so a keyring of the current key (which seals) and older ones (which only open) can be
rotated row by row. Where the keys come from (a variable, a file) is the caller's I/O.

The same keys sign browser tokens (`domain.tokens`): `mac` is HMAC-SHA256 under a subkey
derived from a key (never the AES key itself), named by the key's id like a sealed value.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import secrets
from collections.abc import Callable, Sequence

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from .errors import SecretKeyMissing, SecretUnreadable

__all__ = [
    "PREFIX",
    "SecretBox",
    "SecretKeyMissing",
    "SecretUnreadable",
    "key_id",
    "key_of",
    "missing_message",
    "new_key",
    "parse_key",
]

PREFIX = "enc:v1:"
_KEY_BYTES = 32
_NONCE_BYTES = 12
_AAD = b"outlive sealed secret\x00"
_MAC_KEY = b"outlive mac key\x00"


def new_key() -> str:
    """A new server key as text: base64url of 32 random bytes (AES-256)."""
    return base64.urlsafe_b64encode(secrets.token_bytes(_KEY_BYTES)).decode().rstrip("=")


def parse_key(text: str) -> bytes:
    """The 32 bytes a key's text encodes (base64, standard or url-safe, padding optional)."""
    raw = text.strip()
    try:
        key = base64.b64decode(raw.replace("-", "+").replace("_", "/") + "=" * (-len(raw) % 4),
                               validate=True)
    except (binascii.Error, ValueError):
        raise ValueError("a secret key is base64 of 32 bytes (`outlive secrets new-key` "
                         "makes one)") from None
    if len(key) != _KEY_BYTES:
        raise ValueError(f"a secret key is base64 of 32 bytes, this one encodes {len(key)} "
                         "(`outlive secrets new-key` makes one)")
    return key


def key_id(key: bytes) -> str:
    """A fingerprint that names the key in what it sealed, and tells nothing of it."""
    return hashlib.sha256(b"outlive secret key id\x00" + key).hexdigest()[:12]


def key_of(stored: str) -> str | None:
    """The id of the key a stored value is sealed with; None for plain text."""
    if not stored.startswith(PREFIX):
        return None
    return stored[len(PREFIX):].split(":", 1)[0]


class SecretBox:
    """A keyring: `keys[0]` seals, every key opens what it sealed. `reload` (optional, the
    caller's I/O) gives the keys again, e.g. from a file another process rotated: it is
    asked before sealing and when a value names an unknown key. `hint` says, in errors,
    how to give this process the key it lacks."""

    def __init__(self, keys: Sequence[bytes], *, reload: Callable[[], Sequence[bytes]] | None
                 = None, hint: str = "") -> None:
        self.hint = hint
        self._reload = reload
        self._set(keys)

    def _set(self, keys: Sequence[bytes]) -> None:
        if not keys:
            raise ValueError("a secret box needs at least one key")
        self._ids = [key_id(k) for k in keys]
        self._aead = {kid: AESGCM(k) for kid, k in zip(self._ids, keys, strict=True)}
        self._macs = {kid: hashlib.sha256(_MAC_KEY + k).digest()
                      for kid, k in zip(self._ids, keys, strict=True)}

    @property
    def current(self) -> str:
        """The id of the key that seals."""
        return self._ids[0]

    @property
    def key_ids(self) -> list[str]:
        return list(self._ids)

    def refresh(self) -> None:
        """Take the keys `reload` gives now (a rotation by another process); keep the old
        ones when it fails or gives none."""
        if self._reload is None:
            return
        try:
            keys = self._reload()
        except (OSError, ValueError):
            return
        if keys:
            self._set(keys)

    def knows(self, kid: str) -> bool:
        if kid not in self._aead:
            self.refresh()
        return kid in self._aead

    def seal(self, plaintext: str, row_id: str) -> str:
        """`plaintext` sealed with the current key, bound to `row_id`."""
        self.refresh()
        kid = self._ids[0]
        nonce = secrets.token_bytes(_NONCE_BYTES)
        body = self._aead[kid].encrypt(nonce, plaintext.encode(), _AAD + row_id.encode())
        return f"{PREFIX}{kid}:{base64.urlsafe_b64encode(nonce + body).decode()}"

    def mac(self, purpose: bytes, data: bytes) -> tuple[str, bytes]:
        """An HMAC-SHA256 of `data` under the current key (a subkey for `purpose`, never the
        sealing key itself), and the id of the key: what signs a browser token."""
        self.refresh()
        kid = self._ids[0]
        return kid, hmac.new(self._macs[kid] + purpose, data, hashlib.sha256).digest()

    def mac_with(self, kid: str, purpose: bytes, data: bytes) -> bytes | None:
        """`mac` under the key `kid` (an older one during a rotation); None for a key the
        ring does not hold."""
        if not self.knows(kid):
            return None
        return hmac.new(self._macs[kid] + purpose, data, hashlib.sha256).digest()

    def open(self, stored: str, row_id: str) -> str:
        """The plaintext of a sealed value of `row_id`; raises when the key is not in the
        ring (`SecretKeyMissing`) or does not open it (`SecretUnreadable`)."""
        kid = key_of(stored)
        if kid is None:
            raise SecretUnreadable(f"the secret of {row_id} is not sealed")
        if not self.knows(kid):
            raise SecretKeyMissing(missing_message([kid], self.hint), key_ids=[kid])
        try:
            raw = base64.urlsafe_b64decode(stored[len(PREFIX) + len(kid) + 1:])
            text = self._aead[kid].decrypt(raw[:_NONCE_BYTES], raw[_NONCE_BYTES:],
                                           _AAD + row_id.encode())
        except (InvalidTag, binascii.Error, ValueError):
            raise SecretUnreadable(
                f"the sealed secret of {row_id} does not open with its key {kid}: it was "
                "altered or copied from another row") from None
        return text.decode()


def missing_message(kids: Sequence[str], hint: str) -> str:
    """What a process lacking the keys `kids` says (once at start, not per delivery)."""
    which = ", ".join(sorted(set(kids)))
    return (f"webhook secrets in this database are encrypted with a secret key this process "
            f"does not have (key id {which})" + (f"; {hint}" if hint else ""))
