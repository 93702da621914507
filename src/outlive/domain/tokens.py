"""Browser tokens (docs/end-users.md): short-lived, scoped, signed, never stored.

An owner key mints a token for one end user's sessions or for one session, with a set of
scopes and a lifetime of at most a day; a browser presents it as `Authorization: Bearer`.
The token is `olt_<payload>.<signature>`:

* `<payload>`: base64url (no padding) of compact JSON `{"v": 1, "kid": <server key id>,
  "key": <API key id>, "own": <owner id>, "eu": <end user> | "ses": <session id>,
  "sc": [<scopes>], "iat": <issued, epoch s>, "exp": <expires, epoch s>}`;
* `<signature>`: base64url of HMAC-SHA256 over `olt_<payload>` with a subkey of the server's
  secret key (`SecretBox.mac`: the key that seals webhook secrets, kept outside the
  database), the key named by `kid` so a rotation keeps older tokens valid while the old key
  is in the ring.

Nothing about a token is written to the database: it is checked by its signature, its expiry
and its API key still being live (the caller's lookup), so revoking that key revokes every
token it minted, and a copy of the database holds nothing that mints or checks one.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass

from .secret_box import SecretBox

__all__ = [
    "MAX_TOKEN_CHARS",
    "MAX_TTL",
    "SCOPES",
    "TOKEN_PREFIX",
    "TokenClaims",
    "TokenExpired",
    "TokenInvalid",
    "looks_like_token",
    "mint_token",
    "read_token",
]

TOKEN_PREFIX = "olt_"
SCOPES = ("read", "write", "cancel", "approve", "tools")
"""`read`: get, list, stream, events; `write`: create, message; `cancel`; `approve`: decide
approvals; `tools`: post client tool results."""
MAX_TTL = 86_400
MAX_TOKEN_CHARS = 4096
"""Far above the longest token (an end user id of 200 characters, every scope)."""

_PURPOSE = b"outlive browser token v1\x00"
_SHAPE = re.compile(r"^olt_([A-Za-z0-9_-]{1,4000})\.([A-Za-z0-9_-]{43})$")


class TokenInvalid(Exception):
    """Not a token this server signed (malformed, forged, altered, or its key is gone)."""


class TokenExpired(Exception):
    """A token this server signed whose lifetime is over."""


@dataclass(frozen=True)
class TokenClaims:
    """What a verified token says: whose it is and what it may see and do."""

    key_id: str
    """The API key that minted it: revoking that key revokes the token."""
    owner_id: str
    end_user: str | None
    session_id: str | None
    """Exactly one of `end_user` and `session_id` is set."""
    scopes: frozenset[str]
    issued_at: int
    expires_at: int

    def allows(self, scope: str) -> bool:
        return scope in self.scopes


def looks_like_token(value: str) -> bool:
    """A bearer value that is meant as a token (a key never starts so)."""
    return value.startswith(TOKEN_PREFIX)


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def mint_token(box: SecretBox, *, key_id: str, owner_id: str, end_user: str | None,
               session_id: str | None, scopes: Iterable[str], issued_at: int,
               ttl: int) -> tuple[str, TokenClaims]:
    """A signed token and its claims. The caller has checked its inputs (exactly one of
    `end_user` and `session_id`, known scopes, 1 ≤ ttl ≤ `MAX_TTL`)."""
    wanted = frozenset(scopes)
    if (end_user is None) == (session_id is None) or not wanted <= set(SCOPES) or not wanted:
        raise ValueError("a token names one end user or one session and known scopes")
    if not 0 < ttl <= MAX_TTL:
        raise ValueError(f"a token lives 1 to {MAX_TTL} seconds")
    claims = TokenClaims(key_id, owner_id, end_user, session_id, wanted, issued_at,
                         issued_at + ttl)
    body: dict[str, object] = {"v": 1, "kid": box.current, "key": key_id, "own": owner_id}
    body.update({"eu": end_user} if end_user is not None else {"ses": session_id})
    body.update({"sc": [s for s in SCOPES if s in wanted], "iat": issued_at,
                 "exp": claims.expires_at})
    payload = _b64(json.dumps(body, separators=(",", ":")).encode())
    _, sig = box.mac(_PURPOSE, f"{TOKEN_PREFIX}{payload}".encode())
    return f"{TOKEN_PREFIX}{payload}.{_b64(sig)}", claims


def read_token(box: SecretBox, token: str, *, now: float) -> TokenClaims:
    """The claims of a token this server signed and that is still within its lifetime;
    `TokenInvalid` for anything else that is not yet expired, `TokenExpired` after. Never
    raises anything else, whatever the text."""
    if len(token) > MAX_TOKEN_CHARS:
        raise TokenInvalid("the token is too long")
    match = _SHAPE.match(token)
    if match is None:
        raise TokenInvalid("the token is malformed")
    payload, sig = match.group(1), match.group(2)
    try:
        raw = json.loads(_unb64(payload))
        sent = _unb64(sig)
    except (ValueError, binascii.Error, RecursionError):
        raise TokenInvalid("the token is malformed") from None
    if not isinstance(raw, dict) or raw.get("v") != 1 or not isinstance(raw.get("kid"), str):
        raise TokenInvalid("the token is malformed")
    want = box.mac_with(raw["kid"], _PURPOSE, f"{TOKEN_PREFIX}{payload}".encode())
    if want is None or not hmac.compare_digest(want, sent):
        raise TokenInvalid("the token's signature does not match")
    claims = _claims(raw)
    if claims.expires_at <= now:
        raise TokenExpired("the token has expired")
    return claims


def _claims(raw: dict[str, object]) -> TokenClaims:
    """The claims of a signed payload (signed by this server, so only an older or newer
    format could fail these checks)."""
    key, owner, eu, ses = raw.get("key"), raw.get("own"), raw.get("eu"), raw.get("ses")
    scopes, iat, exp = raw.get("sc"), raw.get("iat"), raw.get("exp")
    if not (isinstance(key, str) and isinstance(owner, str)
            and (isinstance(eu, str) != isinstance(ses, str))
            and (eu is None or isinstance(eu, str)) and (ses is None or isinstance(ses, str))
            and isinstance(scopes, list) and all(s in SCOPES for s in scopes)
            and type(iat) is int and type(exp) is int):
        raise TokenInvalid("the token's claims are not understood")
    return TokenClaims(key, owner, eu if isinstance(eu, str) else None,
                       ses if isinstance(ses, str) else None, frozenset(scopes), iat, exp)
