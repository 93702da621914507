"""`POST /v1/tokens`: an owner key mints a browser token (docs/end-users.md, `domain.tokens`).

Only a request with the owner's API key mints: a token cannot mint tokens (`_scopes` refuses
every unlisted route to tokens), and a login cookie cannot either (the key that would be
named is the login's, and the workbench needs none). A token for one session names a
session of the owner's (404 as anywhere else otherwise). Nothing is written: the answer is
the only copy of the token.
"""

from __future__ import annotations

import time
from typing import Annotated, Literal

from fastapi import APIRouter, Request
from pydantic import BaseModel, Field

from ..domain.errors import InvalidInput
from ..domain.tokens import MAX_TTL, mint_token
from ..store import MAX_END_USER, check_end_user, check_string
from ._auth import CurrentOwner
from ._context import Ctx
from ._errors import ApiError, error_responses
from ._schemas import _Request
from ._scopes import forbidden

__all__ = ["router"]

router = APIRouter(prefix="/v1", tags=["tokens"])

DEFAULT_TTL = 3600
Scope = Literal["read", "write", "cancel", "approve", "tools"]


class CreateToken(_Request):
    """Give exactly one of `end_user` and `session_id`."""

    end_user: str | None = Field(
        default=None, min_length=1, max_length=MAX_END_USER,
        description="The token sees this end user's sessions; a session it creates gets it.")
    session_id: str | None = Field(
        default=None, min_length=1, max_length=100,
        description="Or: the token sees this one session of yours.")
    scopes: Annotated[list[Scope], Field(
        min_length=1, max_length=5,
        description="What it may do: `read` (get, list, stream, events), `write` (create, "
        "message), `cancel`, `approve` (approvals), `tools` (client tool results).")]
    ttl: int = Field(default=DEFAULT_TTL, ge=1, le=MAX_TTL,
                     description=f"Lifetime in seconds, at most {MAX_TTL} (a day).")


class TokenOut(BaseModel):
    token: str = Field(description="`olt_…`: send it as `Authorization: Bearer`. Shown once; "
                       "the server keeps no copy.")
    expires_at: int = Field(description="Epoch seconds.")
    key_id: str = Field(description="The API key that minted it: revoking that key revokes "
                        "the token.")
    end_user: str | None
    session_id: str | None
    scopes: list[str]


@router.post("/tokens", status_code=201, response_model=TokenOut,
             responses=error_responses(400, 401, 403, 404, 422, 503),
             summary="Mint a browser token for one end user or one session (owner key only)")
async def create_token(body: CreateToken, request: Request, owner: CurrentOwner,
                       ctx: Ctx) -> TokenOut:
    cred = getattr(request.state, "credential", None)
    if cred is None or cred.kind != "key":
        raise forbidden("a token is minted with the owner's API key (Authorization: Bearer)")
    if (body.end_user is None) == (body.session_id is None):
        raise InvalidInput("give exactly one of end_user and session_id")
    check_end_user(body.end_user)
    if body.session_id is not None:
        check_string(body.session_id, "session_id")
        await ctx.store.get_session(owner.id, body.session_id)  # 404 for a foreign one
    if ctx.token_keys is None:
        raise ApiError(503, "TOKENS_UNAVAILABLE", "this server was started without a secret "
                       "key, so it cannot sign tokens (docs/security.md)")
    found = await ctx.store.key_for_hash(cred.digest)
    if found is None or found[1].id != owner.id:  # revoked since the lookup was cached
        raise ApiError(401, "UNAUTHORIZED", "the API key is invalid or revoked")
    token, claims = mint_token(
        ctx.token_keys, key_id=found[0], owner_id=owner.id, end_user=body.end_user,
        session_id=body.session_id, scopes=body.scopes, issued_at=int(time.time()),
        ttl=body.ttl)
    return TokenOut(token=token, expires_at=claims.expires_at, key_id=claims.key_id,
                    end_user=claims.end_user, session_id=claims.session_id,
                    scopes=sorted(claims.scopes))
