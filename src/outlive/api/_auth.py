"""Authentication: bearer API keys for programs, a login cookie for the web page.

* `Authorization: Bearer <key>`: the key is hashed (`hash_key`) and looked up with
  `store.owner_for_key(hash)`. When the header is present it alone decides.
* Cookie `outlive_session`: a random login token made by `POST /v1/login {"key"}` (see
  `_login.py`); the store keeps only the token's hash, so neither the key nor anything in the
  database is the cookie. A login slides: it ends after `login_idle` seconds unused, after
  `login_max_age` seconds in any case, at logout, and when its key is revoked.
* Cross-site request forgery: a cookie rides along on any request the browser makes to this
  host, even one a page on another port of the same host starts (SameSite=Strict does not stop
  that: it is the same *site*). So every cookie-authenticated request that changes something
  must come from this server's own page: `Sec-Fetch-Site: same-origin`, or (browsers without
  it) an `Origin` equal to this server's. Anything else is 403 `CROSS_ORIGIN_REQUEST`. Bearer
  requests are not affected: no browser adds that header on its own.
* Lookups (found or not) are cached in-process for `key_cache_ttl` seconds (5 s), so a revoked
  key or an ended login stops working within that time on every API process; open streams
  check again when their entry expires (one watcher per credential however many streams use
  it, `Authenticator.until_revoked`) and close.
* Failed key checks are counted per client address (`LoginThrottle`): past the limit the
  address's failures are 429 with `Retry-After`; a valid key from it still passes.
* `Authorization: Bearer olt_…`: a browser token an owner key minted (`domain.tokens`,
  docs/end-users.md), checked by its signature and expiry, then by its key being live (the
  same cache, so a revoked key's tokens stop within `key_cache_ttl`, and their streams
  close; a stream also closes when its token expires). What it may see and do: `_scopes`.
  A forged or malformed token counts as a failed check; an expired or revoked one does not
  (a browser that kept one is no scanner).

Every failure is 401 `UNAUTHORIZED` with `WWW-Authenticate: Bearer`.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import re
import time
from dataclasses import dataclass, field
from typing import Annotated, Literal

from fastapi import Depends, Request
from fastapi.security import APIKeyCookie, HTTPAuthorizationCredentials, HTTPBearer

from ..domain.tokens import TokenExpired, TokenInvalid, looks_like_token, read_token
from ..store import CredentialStore, Owner
from ..supervision import report_crash
from ._context import ApiContext, ApiSettings, Ctx
from ._errors import ApiError
from ._keys import hash_key, looks_like_key
from ._scopes import authorize, set_viewer

__all__ = [
    "COOKIE_NAME",
    "Authenticator",
    "Credential",
    "CurrentOwner",
    "check_same_origin",
    "client_address",
    "current_owner",
    "hash_token",
    "unauthorized",
]

COOKIE_NAME = "outlive_session"
_CACHE_MAX = 10_000
_SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
_TOKEN = re.compile(r"^[A-Za-z0-9_-]{43}$")
MIN_RECHECK = 0.5
"""Streams re-check their credential at least this far apart (with the cache off)."""

log = logging.getLogger("outlive.api")


@dataclass
class _Watch:
    """The streams waiting on one credential's access to one owner, and the one task that
    re-checks it for all of them."""

    waiters: set[asyncio.Future[None]] = field(default_factory=set)
    task: asyncio.Task[None] | None = None


_bearer = HTTPBearer(auto_error=False, description="An API key: `Authorization: Bearer olk_…`")
_cookie = APIKeyCookie(
    name=COOKIE_NAME, auto_error=False,
    description="Set by POST /v1/login for the web page (a random login token, HttpOnly).",
)


def unauthorized(message: str = "a valid API key is required") -> ApiError:
    return ApiError(401, "UNAUTHORIZED", message)


def hash_token(token: str) -> str:
    """The stored form of a login token (SHA-256, hex): 256 random bits need no slow hash."""
    return hashlib.sha256(token.encode("ascii")).hexdigest()


@dataclass(frozen=True)
class Credential:
    """What a request authenticated with: a key's hash or a login token's hash."""

    kind: Literal["key", "login", "token"]
    digest: str
    """A key's or a login token's hash; for a browser token, the id of the key it names."""


class Authenticator:
    """Resolves credentials to owners through the Store, with a short in-process cache."""

    def __init__(self, store: CredentialStore, settings: ApiSettings) -> None:
        self._store = store
        self._settings = settings
        self._ttl = settings.key_cache_ttl
        self._cache: dict[Credential, tuple[float, Owner | None]] = {}
        self._inflight: dict[Credential, asyncio.Future[tuple[Owner | None, float]]] = {}
        self._watches: dict[tuple[Credential, str], _Watch] = {}

    async def lookup(self, cred: Credential) -> tuple[Owner | None, float]:
        """The owner (or None) and the monotonic time its cache entry expires.

        One store read per credential at a time: the streams of one key all re-check when
        its cache entry expires, and a thousand of them must not become a thousand reads."""
        hit = self._cache.get(cred)
        if hit is not None and hit[0] > time.monotonic():
            return hit[1], hit[0]
        pending = self._inflight.get(cred)
        if pending is None:
            pending = asyncio.ensure_future(self._read(cred))
            self._inflight[cred] = pending
            pending.add_done_callback(lambda t: self._settled(cred, t))
        return await asyncio.shield(pending)

    def _settled(self, cred: Credential, task: asyncio.Future[tuple[Owner | None, float]]) -> None:
        if self._inflight.get(cred) is task:
            del self._inflight[cred]
        if not task.cancelled():
            task.exception()  # retrieved here: a reader that was cancelled meanwhile is fine

    async def _read(self, cred: Credential) -> tuple[Owner | None, float]:
        now = time.monotonic()
        if cred.kind == "key":
            owner = await self._store.owner_for_key(cred.digest)
        elif cred.kind == "token":
            owner = await self._store.owner_for_key_id(cred.digest)
        else:
            owner = await self._store.owner_for_login(
                cred.digest, idle=self._settings.login_idle,
                max_age=self._settings.login_max_age)
        expires = now + self._ttl
        if self._ttl > 0:
            if len(self._cache) >= _CACHE_MAX:
                self._prune(now)
            self._cache[cred] = (expires, owner)
        return owner, expires

    async def owner_for(self, cred: Credential) -> Owner | None:
        return (await self.lookup(cred))[0]

    async def owner_for_key(self, key: str) -> Owner | None:
        if not looks_like_key(key):
            return None
        return await self.owner_for(Credential("key", hash_key(key)))

    async def recheck(self, cred: Credential, owner_id: str) -> float | None:
        """For an open stream: seconds until it should check again, or None when the
        credential no longer gives access to `owner_id` (revoked key, ended login)."""
        owner, expires = await self.lookup(cred)
        if owner is None or owner.id != owner_id:
            return None
        return max(expires - time.monotonic(), MIN_RECHECK)

    async def until_revoked(self, cred: Credential, owner_id: str) -> None:
        """Return once `cred` no longer gives access to `owner_id`.

        One watcher per credential and owner re-checks when the cache entry expires, however
        many streams wait on it: a thousand streams of one key cost one timer and one read per
        expiry, where a re-check per stream woke a thousand tasks at the same instant and
        held every stream's next frame back for a third of a second."""
        key = (cred, owner_id)
        watch = self._watches.get(key)
        if watch is None:
            watch = self._watches[key] = _Watch()
            watch.task = asyncio.create_task(self._watch(key, watch),
                                             name=f"auth-watch:{owner_id}")
            watch.task.add_done_callback(report_crash("auth-watch"))
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        watch.waiters.add(waiter)
        try:
            await waiter
        finally:
            watch.waiters.discard(waiter)
            if not watch.waiters and self._watches.get(key) is watch:
                del self._watches[key]
                if watch.task is not None:
                    watch.task.cancel()

    async def _watch(self, key: tuple[Credential, str], watch: _Watch) -> None:
        """Until the credential stops giving access. Should it crash instead (logged and
        counted by `report_crash`), its streams end too: they fail closed, and their clients
        reconnect through a fresh check."""
        try:
            while True:
                try:
                    nxt = await self.recheck(*key)
                except Exception as exc:  # a store error only postpones the check
                    log.warning("could not re-check a stream's credential: %s", exc)
                    nxt = 1.0
                if nxt is None:
                    break
                await asyncio.sleep(nxt)
        except asyncio.CancelledError:
            raise  # its last stream left (`until_revoked`): nobody is waiting
        except Exception:
            self._release(key, watch)
            raise
        self._release(key, watch)

    def _release(self, key: tuple[Credential, str], watch: _Watch) -> None:
        if self._watches.get(key) is watch:
            del self._watches[key]
        for waiter in watch.waiters:
            if not waiter.done():
                waiter.set_result(None)

    def forget(self, cred: Credential | None = None) -> None:
        if cred is None:
            self._cache.clear()
        else:
            self._cache.pop(cred, None)

    def _prune(self, now: float) -> None:
        for k in [k for k, (exp, _) in self._cache.items() if exp <= now]:
            del self._cache[k]
        if len(self._cache) >= _CACHE_MAX:
            self._cache.clear()


def client_address(request: Request) -> str:
    """The client's address (the proxy's client when `--forwarded-allow-ips` trusts it)."""
    return request.client.host if request.client is not None else "unknown"


def check_same_origin(request: Request) -> None:
    """403 unless this unsafe, non-bearer request comes from this server's own page."""
    if request.method in _SAFE_METHODS:
        return
    site = request.headers.get("sec-fetch-site")
    if site is not None:
        if site == "same-origin":
            return
    else:
        origin = request.headers.get("origin", "").lower()
        host = request.headers.get("host", "").lower()
        if origin and host and origin == f"{request.url.scheme}://{host}":
            return
    raise ApiError(
        403, "CROSS_ORIGIN_REQUEST",
        "a request with the login cookie that changes something must come from this "
        "server's own page (Origin or Sec-Fetch-Site: same-origin); programs send "
        "'Authorization: Bearer <api key>' instead",
    )


async def current_owner(
    request: Request,
    ctx: Ctx,
    bearer: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
    cookie: Annotated[str | None, Depends(_cookie)],
) -> Owner:
    """The owner making this request, or 401 (403 for a cross-origin cookie request, 429
    for a failure from an address past its failed-check limit). The credential is kept in
    the request's state, with the check every stream opened by this request repeats
    (`_remember`)."""
    set_viewer(None)
    header = request.headers.get("authorization")
    if header is not None:
        address = client_address(request)
        if bearer is None or not bearer.credentials:
            ctx.throttle.failed(address, "malformed")
            raise unauthorized("use 'Authorization: Bearer <api key>'")
        key = bearer.credentials
        if looks_like_token(key):
            return await _token_owner(request, ctx, key, address)
        cred = Credential("key", hash_key(key)) if looks_like_key(key) else None
        owner = await ctx.auth.owner_for(cred) if cred is not None else None
        if owner is None or cred is None:
            ctx.throttle.failed(address, "key")
            raise unauthorized("the API key is invalid or revoked")
        _remember(request, ctx, cred, owner)
        return owner
    if cookie:
        check_same_origin(request)
        login = Credential("login", hash_token(cookie)) if _TOKEN.match(cookie) else None
        owner = await ctx.auth.owner_for(login) if login is not None else None
        if owner is None or login is None:
            raise unauthorized("the login has ended (logged out, expired, or its key was "
                               "revoked); log in again")
        _remember(request, ctx, login, owner)
        return owner
    raise unauthorized()


async def _token_owner(request: Request, ctx: ApiContext, token: str, address: str) -> Owner:
    """The owner whose key minted this browser token, with the token's claims set for the
    request (`_scopes.viewer`) and its route and session checked (`_scopes.authorize`)."""
    try:
        if ctx.token_keys is None:
            raise TokenInvalid("this server has no secret key to check tokens with")
        claims = read_token(ctx.token_keys, token, now=time.time())
    except TokenExpired:
        raise unauthorized("the token has expired; ask for a new one") from None
    except TokenInvalid:
        ctx.throttle.failed(address, "token")
        raise unauthorized("the token is invalid") from None
    cred = Credential("token", claims.key_id)
    owner = await ctx.auth.owner_for(cred)
    if owner is None or owner.id != claims.owner_id:
        raise unauthorized("the token's API key was revoked")
    set_viewer(claims)
    await authorize(request, ctx, owner.id, claims)
    _remember(request, ctx, cred, owner, expires_at=claims.expires_at)
    return owner


def _remember(request: Request, ctx: ApiContext, cred: Credential, owner: Owner,
              expires_at: float | None = None) -> None:
    """Keep how the request authenticated, and how a stream it opens checks that again
    (`EventStream` finds `stream_recheck` in the request's state): until the credential
    is revoked, or a token's `expires_at` (epoch seconds) comes."""
    auth = ctx.auth

    async def recheck() -> float | None:
        if expires_at is None:
            await auth.until_revoked(cred, owner.id)
            return None
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(max(0.0, expires_at - time.time())):
                await auth.until_revoked(cred, owner.id)
        return None

    request.state.credential = cred
    request.state.stream_recheck = recheck


CurrentOwner = Annotated[Owner, Depends(current_owner)]
