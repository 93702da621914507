"""Authentication: bearer API keys for programs, an HttpOnly cookie for the web page.

* `Authorization: Bearer <key>`: the key is hashed (`hash_key`) and looked up with
  `store.owner_for_key(hash)`. When the header is present it alone decides.
* Cookie `outlive_session`: set by `POST /v1/login {"key"}`; its value is the key's hash (never
  the key), verified the same way. It is HttpOnly, SameSite=Strict and Path=/ (plus Secure with
  `ApiSettings.cookie_secure`); SameSite=Strict keeps other sites from riding it (CSRF), and
  JSON bodies are only accepted with a JSON content type, which plain HTML forms cannot send.
  `POST /v1/logout` clears it.
* Lookups (found or not) are cached in-process for `key_cache_ttl` seconds (5 s), so a revoked
  key stops working within that time on every API process.

Every failure is 401 `UNAUTHORIZED` with `WWW-Authenticate: Bearer`.
"""

from __future__ import annotations

import time
from typing import Annotated

from fastapi import APIRouter, Depends, Request, Response
from fastapi.security import APIKeyCookie, HTTPAuthorizationCredentials, HTTPBearer
from pydantic import BaseModel, ConfigDict, Field

from ..store import Owner, Store
from ._context import Ctx
from ._errors import ApiError, error_responses
from ._keys import hash_key, looks_like_key

__all__ = ["COOKIE_NAME", "Authenticator", "CurrentOwner", "current_owner", "router"]

COOKIE_NAME = "outlive_session"
_CACHE_MAX = 10_000

_bearer = HTTPBearer(auto_error=False, description="An API key: `Authorization: Bearer olk_…`")
_cookie = APIKeyCookie(
    name=COOKIE_NAME, auto_error=False,
    description="Set by POST /v1/login for the web page (the key's hash, HttpOnly).",
)


def unauthorized(message: str = "a valid API key is required") -> ApiError:
    return ApiError(401, "UNAUTHORIZED", message)


class Authenticator:
    """Resolves key hashes to owners through the Store, with a short in-process cache."""

    def __init__(self, store: Store, ttl: float) -> None:
        self._store = store
        self._ttl = ttl
        self._cache: dict[str, tuple[float, Owner | None]] = {}

    async def owner_for_hash(self, key_hash: str) -> Owner | None:
        now = time.monotonic()
        hit = self._cache.get(key_hash)
        if hit is not None and hit[0] > now:
            return hit[1]
        owner = await self._store.owner_for_key(key_hash)
        if self._ttl > 0:
            if len(self._cache) >= _CACHE_MAX:
                self._prune(now)
            self._cache[key_hash] = (now + self._ttl, owner)
        return owner

    async def owner_for_key(self, key: str) -> Owner | None:
        if not looks_like_key(key):
            return None
        return await self.owner_for_hash(hash_key(key))

    def forget(self) -> None:
        self._cache.clear()

    def _prune(self, now: float) -> None:
        for k in [k for k, (exp, _) in self._cache.items() if exp <= now]:
            del self._cache[k]
        if len(self._cache) >= _CACHE_MAX:
            self._cache.clear()


async def current_owner(
    request: Request,
    ctx: Ctx,
    bearer: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
    cookie: Annotated[str | None, Depends(_cookie)],
) -> Owner:
    """The owner making this request, or 401."""
    header = request.headers.get("authorization")
    if header is not None:
        if bearer is None or not bearer.credentials:
            raise unauthorized("use 'Authorization: Bearer <api key>'")
        owner = await ctx.auth.owner_for_key(bearer.credentials)
        if owner is None:
            raise unauthorized("the API key is invalid or revoked")
        return owner
    if cookie:
        owner = None
        if len(cookie) == 64 and all(c in "0123456789abcdef" for c in cookie):
            owner = await ctx.auth.owner_for_hash(cookie)
        if owner is None:
            raise unauthorized("the session cookie is invalid or its key was revoked")
        return owner
    raise unauthorized()


CurrentOwner = Annotated[Owner, Depends(current_owner)]


# ---- login / logout ---------------------------------------------------------------------------


class LoginRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    key: str = Field(min_length=1, max_length=200, description="An API key.")


class LoginResponse(BaseModel):
    ok: bool = True
    owner: str = Field(description="The name of the key's owner.")


class LogoutResponse(BaseModel):
    ok: bool = True


router = APIRouter(prefix="/v1", tags=["auth"])


@router.post(
    "/login",
    response_model=LoginResponse,
    responses=error_responses(401, 400, 413, 422),
    summary="Exchange an API key for the web page's session cookie",
)
async def login(body: LoginRequest, response: Response, ctx: Ctx) -> LoginResponse:
    owner = await ctx.auth.owner_for_key(body.key)
    if owner is None:
        raise unauthorized("the API key is invalid or revoked")
    response.set_cookie(
        COOKIE_NAME,
        hash_key(body.key),
        httponly=True,
        samesite="strict",
        secure=ctx.settings.cookie_secure,
        path="/",
    )
    return LoginResponse(owner=owner.name)


@router.post(
    "/logout",
    response_model=LogoutResponse,
    summary="Clear the web page's session cookie",
)
async def logout(response: Response, ctx: Ctx) -> LogoutResponse:
    response.delete_cookie(
        COOKIE_NAME, path="/", httponly=True, samesite="strict",
        secure=ctx.settings.cookie_secure,
    )
    return LogoutResponse()
