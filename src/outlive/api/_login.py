"""`POST /v1/login` and `POST /v1/logout`: the web page's login, a server-side session.

Login exchanges an API key for a random 256-bit token in the `outlive_session` cookie; the
store keeps only the token's hash, tied to the key (`store.create_login`). The cookie is
HttpOnly, SameSite=Strict, Path=/, lives `login_max_age` seconds, and is `Secure` when
`cookie_secure` is set or the request reached the server over HTTPS (as uvicorn's proxy
headers report it for a proxy in `--forwarded-allow-ips`). Logout ends the login in the store,
so the cookie is worthless afterwards even if it was copied.

Both refuse cross-origin requests like every other cookie request that changes something (a
page elsewhere must not log a browser in to the attacker's account either), and login counts
as a key check for the failed-login limit.
"""

from __future__ import annotations

import secrets

from fastapi import APIRouter, Request, Response
from pydantic import BaseModel, ConfigDict, Field

from ._auth import (
    COOKIE_NAME,
    Credential,
    check_same_origin,
    client_address,
    hash_token,
    unauthorized,
)
from ._context import Ctx
from ._errors import error_responses
from ._keys import hash_key, looks_like_key

__all__ = ["router"]


class LoginRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    key: str = Field(min_length=1, max_length=200, description="An API key.")


class LoginResponse(BaseModel):
    ok: bool = True
    owner: str = Field(description="The name of the key's owner.")


class LogoutResponse(BaseModel):
    ok: bool = True


router = APIRouter(prefix="/v1", tags=["auth"])


def _secure(request: Request, ctx: Ctx) -> bool:
    return ctx.settings.cookie_secure or request.url.scheme == "https"


@router.post(
    "/login",
    response_model=LoginResponse,
    responses=error_responses(400, 401, 403, 413, 422, 429),
    summary="Exchange an API key for the web page's login cookie",
)
async def login(body: LoginRequest, request: Request, response: Response, ctx: Ctx
                ) -> LoginResponse:
    check_same_origin(request)
    address = client_address(request)
    token = secrets.token_urlsafe(32)
    owner = None
    if looks_like_key(body.key):
        owner = await ctx.store.create_login(hash_key(body.key), hash_token(token),
                                             max_age=ctx.settings.login_max_age)
    if owner is None:
        ctx.throttle.failed(address, "login")
        raise unauthorized("the API key is invalid or revoked")
    response.set_cookie(
        COOKIE_NAME, token, max_age=int(ctx.settings.login_max_age), httponly=True,
        samesite="strict", secure=_secure(request, ctx), path="/",
    )
    return LoginResponse(owner=owner.name)


@router.post(
    "/logout",
    response_model=LogoutResponse,
    responses=error_responses(403),
    summary="End the web page's login and clear its cookie",
)
async def logout(request: Request, response: Response, ctx: Ctx) -> LogoutResponse:
    check_same_origin(request)
    token = request.cookies.get(COOKIE_NAME)
    if token and len(token) <= 100:
        digest = hash_token(token)
        await ctx.store.end_login(digest)
        ctx.auth.forget(Credential("login", digest))
    response.delete_cookie(
        COOKIE_NAME, path="/", httponly=True, samesite="strict", secure=_secure(request, ctx),
    )
    return LogoutResponse()
