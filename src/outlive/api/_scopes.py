"""What a browser token may see and do (docs/end-users.md).

A request authenticated with a token (`_auth.current_owner`) acts as the owner that minted
it, narrowed twice:

* **Scopes**, by route: every route a token may call is in `ROUTE_SCOPES` with the scope it
  needs (a missing one is 403 `FORBIDDEN`); any other route (webhooks, budgets, keys, tokens,
  schedules, owner usage and events, deletes, ...) takes the owner's key and refuses a token
  with 403. A new route is refused to tokens until it is listed here.
* **Sessions**: a token for an end user sees that end user's sessions (and a session it
  creates gets its end user); a token for a session sees that session. Every other session
  answers exactly as an unknown id does. `authorize` checks a `/v1` route's `{session_id}`
  before the route runs; the protocol surfaces check the session they resolve a chat,
  thread or response id to (`visible_session`, `sees`), and their creates take
  `creating_for`.

The token's claims are kept for the request in a context variable (`viewer()`): set by the
auth dependency in the request's task, read by the helpers the routes already call, so no
owner-scoped store call needs another argument. Requests with a key or a login have none.
"""

from __future__ import annotations

import hashlib
from contextvars import ContextVar

from fastapi import Request

from ..domain.errors import NotFound
from ..domain.model import Session
from ..domain.tokens import TokenClaims
from ..store import check_string
from ._context import ApiContext
from ._errors import ApiError

__all__ = [
    "ROUTE_SCOPES",
    "authorize",
    "chat_end_user",
    "creating_for",
    "forbidden",
    "require_scope",
    "scoped_request_id",
    "sees",
    "set_viewer",
    "viewer",
    "visible_session",
]

ROUTE_SCOPES: dict[tuple[str, str], str] = {
    ("GET", "/v1/meta"): "read",
    ("GET", "/v1/sessions"): "read",
    ("POST", "/v1/sessions"): "write",
    ("GET", "/v1/sessions/{session_id}"): "read",
    ("POST", "/v1/sessions/{session_id}/messages"): "write",
    ("POST", "/v1/sessions/{session_id}/compact"): "write",
    ("POST", "/v1/sessions/{session_id}/cancel"): "cancel",
    ("GET", "/v1/sessions/{session_id}/events"): "read",
    ("GET", "/v1/sessions/{session_id}/usage"): "read",
    ("GET", "/v1/sessions/{session_id}/approvals"): "read",
    ("POST", "/v1/sessions/{session_id}/approvals/{approval_id}"): "approve",
    ("GET", "/v1/sessions/{session_id}/tool-calls"): "read",
    ("POST", "/v1/sessions/{session_id}/tool-results"): "tools",
    ("POST", "/v1/sessions/{session_id}/fork"): "write",
    ("POST", "/v1/sessions/{session_id}/messages/{seq}/edit"): "write",
    ("POST", "/v1/sessions/{session_id}/regenerate"): "write",
    ("GET", "/v1/sessions/{session_id}/branches"): "read",
    ("POST", "/ai-sdk/chat"): "write",
    ("GET", "/ai-sdk/chat/{chat_id}/stream"): "read",
    ("POST", "/ai-sdk/chat/{chat_id}/stop"): "cancel",
    ("POST", "/ag-ui"): "write",
    ("GET", "/ag-ui/{thread_id}/runs/{run_id}/events"): "read",
    ("POST", "/ag-ui/{thread_id}/runs/{run_id}/cancel"): "cancel",
    ("POST", "/openai/v1/responses"): "write",
    ("GET", "/openai/v1/responses/{response_id}"): "read",
    ("POST", "/openai/v1/responses/{response_id}/cancel"): "cancel",
    ("GET", "/openai/v1/models"): "read",
}
"""(method, route path) → the scope a token needs there. Not listed: the owner's key only."""

_OPENAI = "/openai/v1"
_VIEWER: ContextVar[TokenClaims | None] = ContextVar("outlive_viewer", default=None)


def set_viewer(claims: TokenClaims | None) -> None:
    """The current request's token claims (None: a key or a login)."""
    _VIEWER.set(claims)


def viewer() -> TokenClaims | None:
    return _VIEWER.get()


def forbidden(message: str) -> ApiError:
    return ApiError(403, "FORBIDDEN", message)


def _route_key(request: Request) -> tuple[str, str] | None:
    route = request.scope.get("route")
    path = getattr(route, "path", None)
    if not isinstance(path, str):
        return None
    method = "GET" if request.method == "HEAD" else request.method
    mounted = request.url.path.startswith(_OPENAI + "/") and not path.startswith(_OPENAI)
    return method, (_OPENAI + path if mounted else path)


def sees(claims: TokenClaims | None, session: Session) -> bool:
    """Whether a request with `claims` may see `session` (its owner's already)."""
    if claims is None:
        return True
    if claims.session_id is not None:
        return session.id == claims.session_id
    return session.end_user is not None and session.end_user == claims.end_user


async def visible_session(ctx: ApiContext, owner_id: str, session_id: str) -> Session:
    """The owner's session, if this request may see it; `NotFound` worded as the store's
    for an unknown id otherwise, so the two answer alike."""
    session = await ctx.store.get_session(owner_id, session_id)
    if not sees(viewer(), session):
        raise NotFound(f"session {session_id} not found")
    return session


def require_scope(scope: str) -> None:
    """403 unless the request's token (if any) has `scope`: for what a protocol request's
    body does beyond its route's own scope (an approval answered, tool results given)."""
    claims = viewer()
    if claims is not None and not claims.allows(scope):
        raise forbidden(f"the token lacks the {scope!r} scope")


def creating_for(given: str | None = None) -> str | None:
    """The end user a session created by this request gets: the token's (a token for one
    session cannot create any, 403; one for another end user than its own is 403 too), or
    `given` without a token."""
    claims = viewer()
    if claims is None:
        return given
    if claims.end_user is None:
        raise forbidden("a token for one session cannot create sessions")
    if given is not None and given != claims.end_user:
        raise forbidden("a token for an end user creates sessions for that end user only")
    return claims.end_user


def scoped_request_id(client_request_id: str | None) -> str | None:
    """A create's idempotency key as the store keeps it: a token's is its end user's own
    (hashed with it), so a key another end user used replays nothing of theirs."""
    claims = viewer()
    if claims is None or client_request_id is None or claims.end_user is None:
        return client_request_id
    check_string(client_request_id, "client_request_id")  # refused as the store would
    digest = hashlib.sha256(f"{claims.end_user}\x00{client_request_id}".encode()).hexdigest()
    return f"end_user:{digest}"


def chat_end_user() -> str | None:
    """The end user a chat or thread id is looked up within (None: the owner's whole)."""
    claims = viewer()
    return None if claims is None else claims.end_user


async def authorize(request: Request, ctx: ApiContext, owner_id: str,
                    claims: TokenClaims) -> None:
    """Before a token's request runs: its route must be one a token may call, with the
    scope it needs (403), and a `/v1` route's `{session_id}` one the token sees (404)."""
    key = _route_key(request)
    scope = ROUTE_SCOPES.get(key) if key is not None else None
    if scope is None:
        raise forbidden("this route takes the owner's API key; a browser token cannot use it")
    if not claims.allows(scope):
        raise forbidden(f"the token lacks the {scope!r} scope")
    session_id = request.path_params.get("session_id")
    if isinstance(session_id, str):
        await visible_session(ctx, owner_id, session_id)
