"""Response headers every API answer carries, and `OPTIONS` answered from the routes.

* `X-Content-Type-Options: nosniff` on everything: a browser never guesses a type (a JSON
  body holding markup is never run as a page).
* `Cache-Control: no-store` on every response that does not set its own: API answers are one
  owner's data and must not stay in a shared or browser cache (the workbench's files set
  `no-cache` with an ETag themselves).
* `OPTIONS <path>` is 204 with `Allow:` listing the methods the routes really serve for that
  path (no CORS: the API is not meant to be called from other origins' pages); an unknown path
  stays 404.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from starlette.routing import BaseRoute, Match, Mount
from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["AllowedMethods", "SecurityHeaders", "allowed_methods"]

_NOSNIFF = (b"x-content-type-options", b"nosniff")
_NO_STORE = (b"cache-control", b"no-store")


class SecurityHeaders:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                names = {name.lower() for name, _ in headers}
                if _NOSNIFF[0] not in names:
                    headers.append(_NOSNIFF)
                if _NO_STORE[0] not in names:
                    headers.append(_NO_STORE)
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, send_with_headers)


_METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE")


def allowed_methods(routes: Iterable[BaseRoute], scope: Scope) -> set[str]:
    """The methods some route serves at `scope`'s path (mounted apps included): each method
    is tried the way the router itself would match it."""
    out: set[str] = set()
    for method in _METHODS:
        probe = {**scope, "method": method}
        for route in routes:
            match, child = route.matches(probe)
            if match is not Match.FULL:
                continue
            if isinstance(route, Mount):
                inner: Any = getattr(route.app, "router", route.app)
                if method in allowed_methods(getattr(inner, "routes", []), {**probe, **child}):
                    out.add(method)
            else:
                out.add(method)
            break
    return out


class AllowedMethods:
    """`OPTIONS` answered from the routes, and a 405's `Allow` corrected the same way (the
    router names only the methods of the first route whose path matched)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        router: Any = getattr(scope.get("app"), "router", None)

        def allow() -> bytes:
            methods = allowed_methods(getattr(router, "routes", []), scope)
            return ", ".join(sorted(methods | {"OPTIONS"})).encode() if methods else b""

        if scope["method"] == "OPTIONS":
            allowed = allow()
            if allowed:
                await send({"type": "http.response.start", "status": 204,
                            "headers": [(b"allow", allowed), (b"content-length", b"0")]})
                await send({"type": "http.response.body", "body": b""})
                return

        async def send_with_allow(message: Message) -> None:
            if message["type"] == "http.response.start" and message["status"] == 405:
                allowed = allow()
                if allowed:
                    headers = [(k, v) for k, v in message.get("headers", [])
                               if k.lower() != b"allow"]
                    message = {**message, "headers": [*headers, (b"allow", allowed)]}
            await send(message)

        await self.app(scope, receive, send_with_allow)
