"""Every error leaves the API as `{"error": {"code", "message", ...details}}`, never a trace.

* `OutliveError` subclasses map by their own `code` and `http_status` (NotFound 404,
  InvalidInput 400, TooLarge 413, UnknownRoute 400, AlreadyTerminal 409 with `status`, …).
* `StoreUnavailable` (the database is down or unreachable) is 503 `STORE_UNAVAILABLE` with
  `Retry-After` on every route: the request may well succeed in a moment. Every other server
  error is 500 `INTERNAL` with no detail (the cause goes to the log, never to the client).
* `ApiError` is for refusals only the API knows (`UNKNOWN_AGENT`, `BAD_CURSOR`, …).
* Validation errors are 422 `VALIDATION_ERROR` with a sanitised `errors` list (no echo of the
  input); malformed JSON is 400 `INVALID_JSON`; unknown paths 404; wrong methods 405.
* `BodyLimit` refuses bodies over `max_body` with 413, by Content-Length up front and by
  counting the bytes actually received (chunked uploads cannot sneak past it).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..domain.errors import OutliveError, StoreUnavailable

__all__ = [
    "RETRY_AFTER_SECONDS",
    "ApiError",
    "BodyLimit",
    "ErrorBody",
    "ErrorResponse",
    "error_json",
    "error_responses",
    "install_error_handlers",
    "retry_after",
]

log = logging.getLogger("outlive.api")

RETRY_AFTER_SECONDS = 2
"""What a 503 asks clients to wait: a restarting database is usually back within seconds."""


class ApiError(Exception):
    """A refusal decided in the API layer; same body shape as every other error."""

    def __init__(self, status: int, code: str, message: str, *,
                 headers: Mapping[str, str] | None = None, **details: Any) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.headers = dict(headers or {})
        self.details = details


class ErrorBody(BaseModel):
    model_config = ConfigDict(extra="allow")

    code: str = Field(description="Stable machine-readable code, e.g. NOT_FOUND.")
    message: str = Field(description="Human-readable explanation.")


class ErrorResponse(BaseModel):
    """Every 4xx/5xx body. `error` may carry more fields (e.g. `status`, `known`, `errors`)."""

    error: ErrorBody


_DESCRIPTIONS = {
    400: "Invalid input (codes INVALID_INPUT, INVALID_JSON, UNKNOWN_AGENT, "
    "UNKNOWN_MODEL_ROUTE, BAD_CURSOR)",
    401: "Missing, invalid or revoked API key (UNAUTHORIZED)",
    403: "A login-cookie request that changes something came from another origin "
    "(CROSS_ORIGIN_REQUEST), or a browser token on a route or with a scope it does not have "
    "(FORBIDDEN)",
    404: "No such session for this owner (NOT_FOUND; identical for foreign sessions)",
    409: "Conflict (SESSION_BUSY, SESSION_ALREADY_TERMINAL with `status`, "
    "SESSION_CANNOT_COMPACT)",
    413: "Too large (TOO_LARGE: text over 100,000 characters or body over the limit; "
    "HISTORY_TOO_LARGE with `limit_bytes`: the session's history would pass its quota)",
    422: "Request failed validation (VALIDATION_ERROR with `errors`)",
    429: "Too many failed key checks from this address (TOO_MANY_FAILED_LOGINS, with "
    "Retry-After), or a quota reached (QUOTA_EXCEEDED with `quota` and `limit`; Retry-After "
    "for creates per minute)",
    503: "The store is unreachable (STORE_UNAVAILABLE)",
}


def error_responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI `responses=` entries documenting the error body for these statuses."""
    return {s: {"model": ErrorResponse, "description": _DESCRIPTIONS[s]} for s in statuses}


def _jsonable(value: Any) -> Any:
    """A detail as JSON that encodes as UTF-8: an echoed input may hold a lone surrogate."""
    try:
        text = json.dumps(value, ensure_ascii=False)
        text.encode("utf-8")
    except UnicodeEncodeError:
        return json.loads(text.encode("utf-8", "replace"))
    except (TypeError, ValueError):
        return str(value).encode("utf-8", "replace").decode("utf-8")
    return value


def error_json(
    status: int,
    code: str,
    message: str,
    details: Mapping[str, Any] | None = None,
    headers: Mapping[str, str] | None = None,
) -> JSONResponse:
    body: dict[str, Any] = {"code": code, "message": _jsonable(message)}
    for key, value in (details or {}).items():
        if key not in body:
            body[key] = _jsonable(value)
    return JSONResponse({"error": body}, status_code=status, headers=dict(headers or {}))


def _clean_errors(errors: Iterable[Any]) -> list[dict[str, Any]]:
    out = []
    for e in errors:
        if not isinstance(e, Mapping):
            continue
        out.append(
            {
                "loc": [str(p) if not isinstance(p, int) else p for p in e.get("loc", ())],
                "msg": str(e.get("msg", "")),
                "type": str(e.get("type", "")),
            }
        )
    return out


async def _on_outlive_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, OutliveError)
    status = exc.http_status if 400 <= exc.http_status < 600 else 500
    if status >= 500:
        log.error("internal error on %s %s: %s", request.method, request.url.path, exc)
        return error_json(500, "INTERNAL", "internal server error")
    return error_json(status, exc.code, exc.message, exc.details, retry_after(exc))


def retry_after(exc: OutliveError) -> dict[str, str]:
    """`Retry-After` for a refusal that says when to retry (a quota's window, in seconds)."""
    wait = exc.details.get("retry_after")
    return {"Retry-After": str(int(wait))} if isinstance(wait, int) else {}


async def _on_store_unavailable(request: Request, exc: Exception) -> JSONResponse:
    log.warning("store unavailable on %s %s: %s", request.method, request.url.path, exc)
    return error_json(
        503, StoreUnavailable.code, "the store is unreachable; retry shortly",
        headers={"Retry-After": str(RETRY_AFTER_SECONDS)},
    )


async def _on_api_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, ApiError)
    headers = {"WWW-Authenticate": "Bearer"} if exc.status == 401 else {}
    return error_json(exc.status, exc.code, exc.message, exc.details,
                      {**headers, **exc.headers})


async def _on_validation(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    errors = list(exc.errors())
    if any(isinstance(e, Mapping) and e.get("type") == "json_invalid" for e in errors):
        return error_json(400, "INVALID_JSON", "the request body is not valid JSON")
    cleaned = _clean_errors(errors)
    first = cleaned[0] if cleaned else None
    message = "request failed validation"
    if first is not None:
        where = ".".join(str(p) for p in first["loc"])
        message = f"{where}: {first['msg']}" if where else first["msg"]
    return error_json(422, "VALIDATION_ERROR", message, {"errors": cleaned})


_HTTP_CODES = {
    400: "BAD_REQUEST",
    401: "UNAUTHORIZED",
    403: "FORBIDDEN",
    404: "NOT_FOUND",
    405: "METHOD_NOT_ALLOWED",
    406: "NOT_ACCEPTABLE",
    413: "TOO_LARGE",
    415: "UNSUPPORTED_MEDIA_TYPE",
    429: "TOO_MANY_REQUESTS",
}


async def _on_http_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    status = exc.status_code
    code = _HTTP_CODES.get(status, "ERROR" if status < 500 else "INTERNAL")
    detail = exc.detail if isinstance(exc.detail, str) else None
    if status == 400 and detail == "There was an error parsing the body":
        return error_json(400, "INVALID_JSON", "the request body is not valid JSON")
    if status == 404:
        message = "no such endpoint"
    elif status == 405:
        message = f"method {request.method} is not allowed here"
    else:
        message = detail or code.lower().replace("_", " ")
    return error_json(status, code, message, headers=exc.headers)


async def _on_unexpected(request: Request, exc: Exception) -> JSONResponse:
    log.exception("unhandled error on %s %s", request.method, request.url.path)
    return error_json(500, "INTERNAL", "internal server error")


def install_error_handlers(app: FastAPI) -> None:
    app.add_exception_handler(StoreUnavailable, _on_store_unavailable)
    app.add_exception_handler(OutliveError, _on_outlive_error)
    app.add_exception_handler(ApiError, _on_api_error)
    app.add_exception_handler(RequestValidationError, _on_validation)
    app.add_exception_handler(StarletteHTTPException, _on_http_error)
    app.add_exception_handler(Exception, _on_unexpected)


# ---- body size limit ------------------------------------------------------------------------


_DRAIN_LIMIT = 64 * 1024 * 1024
"""Bodies over the limit but under this are read and dropped before the 413 is sent."""

_BODY_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})


class BodyLimit:
    """Pure ASGI middleware: 413 for request bodies over `max_body` bytes.

    Bodies are read in full here (they are at most `max_body`, 1 MiB by default) and replayed
    to the app, so the limit holds whether or not the client sent a Content-Length. Requests
    without a body (GET streams) pass through untouched, so the stream still hears the
    client's disconnect.
    """

    def __init__(self, app: ASGIApp, max_body: int, exempt: tuple[str, ...] = ()) -> None:
        self.app = app
        self.max_body = max_body
        self.exempt = exempt
        """Path prefixes left to an inner limit that answers in another error shape."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (scope["type"] != "http" or scope["method"] not in _BODY_METHODS
                or (self.exempt and str(scope.get("path", "")).startswith(self.exempt))):
            await self.app(scope, receive, send)
            return
        length = _content_length(scope)
        if length is not None and length > self.max_body:
            await self._refuse(scope, receive, send, drain=length <= _DRAIN_LIMIT)
            return
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body:
                more = bool(message.get("more_body", False))
                await self._refuse(scope, receive, send, drain=more, drained=size)
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

    async def _refuse(
        self, scope: Scope, receive: Receive, send: Send, *, drain: bool, drained: int = 0
    ) -> None:
        # Read (and drop) the rest of a body of reasonable size first: a client that is still
        # sending when the connection closes sees a reset instead of this answer.
        while drain and drained <= _DRAIN_LIMIT:
            message = await receive()
            if message["type"] != "http.request":
                return
            drained += len(message.get("body", b""))
            if not message.get("more_body", False):
                break
        await self.refusal()(scope, receive, send)

    def refusal(self) -> JSONResponse:
        """The 413 answer."""
        return error_json(
            413, "TOO_LARGE", f"request body is larger than {self.max_body} bytes",
            {"limit": self.max_body}, {"Connection": "close"},
        )


def _content_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None
