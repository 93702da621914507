"""CORS for browser tokens (docs/end-users.md): the pages of configured origins may call the
token routes with `Authorization: Bearer olt_…`, and no other origin's page may.

* Only `/v1/…`, `/ai-sdk/…`, `/ag-ui…` and `/openai/v1/…` answer CORS, and only to an
  `Origin` in `ApiSettings.cors_origins` (`--cors-origin`): a preflight (`OPTIONS` with
  `Access-Control-Request-Method`) is 204 with the methods and headers a token's requests
  use; an actual answer carries `Access-Control-Allow-Origin: <that origin>` and exposes the
  headers a client needs to resume a stream (the run and session ids, the tail index).
* Never `Access-Control-Allow-Credentials`: a page's request that brings cookies is not
  readable by it, so the login cookie is no way in (and `_auth.check_same_origin` refuses
  its writes anyway). A token travels in the `Authorization` header the page sets.
* Another origin gets no CORS header at all: its preflight gets the plain `OPTIONS` answer,
  which the browser refuses; a simple request runs as without CORS, but the page cannot read
  the answer (and without a credential it is 401).
"""

from __future__ import annotations

from collections.abc import Iterable

from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["CORS_PREFIXES", "Cors"]

CORS_PREFIXES = ("/v1/", "/ai-sdk/", "/ag-ui", "/openai/v1/")
_METHODS = b"GET, HEAD, POST, DELETE"
_HEADERS = b"authorization, content-type, last-event-id, idempotency-key, traceparent"
_EXPOSE = (b"x-outlive-session-id, x-workflow-run-id, x-workflow-stream-tail-index, "
           b"x-vercel-ai-ui-message-stream, retry-after, www-authenticate")
_MAX_AGE = b"600"


class Cors:
    def __init__(self, app: ASGIApp, *, origins: Iterable[str]) -> None:
        self.app = app
        self.origins = frozenset(o.rstrip("/").lower() for o in origins)

    def _origin(self, scope: Scope) -> bytes | None:
        """The request's Origin, when it is configured and the path is a token route."""
        path: str = scope.get("path", "")
        if not path.startswith(CORS_PREFIXES):
            return None
        for name, value in scope.get("headers", []):
            if name == b"origin":
                try:
                    text = value.decode("ascii").lower()
                except UnicodeDecodeError:
                    return None
                return value if text in self.origins else None
        return None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        origin = self._origin(scope) if scope["type"] == "http" and self.origins else None
        if origin is None:
            await self.app(scope, receive, send)
            return
        vary = (b"vary", b"Origin")
        allow = (b"access-control-allow-origin", origin)
        preflight = scope["method"] == "OPTIONS" and any(
            name == b"access-control-request-method" for name, _ in scope.get("headers", []))
        if preflight:
            await send({"type": "http.response.start", "status": 204, "headers": [
                allow, vary, (b"access-control-allow-methods", _METHODS),
                (b"access-control-allow-headers", _HEADERS),
                (b"access-control-max-age", _MAX_AGE), (b"content-length", b"0")]})
            await send({"type": "http.response.body", "body": b""})
            return

        async def send_with_cors(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = [(k, v) for k, v in message.get("headers", [])
                           if not k.lower().startswith(b"access-control-")]
                message = {**message, "headers": [
                    *headers, allow, vary, (b"access-control-expose-headers", _EXPOSE)]}
            await send(message)

        await self.app(scope, receive, send_with_cors)
