"""Errors in OpenAI's shape on the `/openai/v1` surface: `{"error": {message, type, param,
code}}`, so the official SDKs raise their usual exceptions (`AuthenticationError` for 401,
`NotFoundError` for 404, `BadRequestError` for 400, …) with a readable message.

Everything the rest of the API raises is translated here: the shared auth dependency's 401,
store errors (`NotFound`, `TooLarge`, …), request validation, unknown paths and oversized bodies.
A store outage is 503 with `Retry-After`, as on the rest of the API (the SDKs retry it).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from ...domain.errors import OutliveError, StoreUnavailable
from .._errors import RETRY_AFTER_SECONDS, ApiError, BodyLimit, retry_after

__all__ = [
    "OpenAIBodyLimit",
    "OpenAIError",
    "bad_request",
    "install_openai_errors",
    "not_found",
    "openai_error",
]

log = logging.getLogger("outlive.api.openai")

INVALID = "invalid_request_error"


class OpenAIError(Exception):
    """A refusal on the OpenAI surface, already in OpenAI's words."""

    def __init__(self, status: int, message: str, *, param: str | None = None,
                 code: str | None = None, type: str = INVALID) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code
        self.type = type


def openai_error(status: int, message: str, *, type: str = INVALID, param: str | None = None,
                 code: str | None = None, headers: Mapping[str, str] | None = None
                 ) -> JSONResponse:
    body = {"error": {"message": _utf8(message), "type": type,
                      "param": None if param is None else _utf8(param), "code": code}}
    return JSONResponse(body, status_code=status, headers=dict(headers or {}))


def _utf8(text: str) -> str:
    """Echoed input may hold a lone surrogate (valid as a JSON escape, not as UTF-8)."""
    return text.encode("utf-8", "replace").decode("utf-8")


async def _on_openai(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, OpenAIError)
    return openai_error(exc.status, exc.message, type=exc.type, param=exc.param, code=exc.code)


async def _on_store_unavailable(request: Request, exc: Exception) -> JSONResponse:
    log.warning("store unavailable on %s %s: %s", request.method, request.url.path, exc)
    return openai_error(503, "The server is temporarily unable to reach its database; "
                        "retry shortly.", type="server_error", code="store_unavailable",
                        headers={"Retry-After": str(RETRY_AFTER_SECONDS)})


async def _on_api(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, ApiError)
    if exc.status == 401:
        return openai_error(401, exc.message, code="invalid_api_key",
                            headers={"WWW-Authenticate": "Bearer"})
    return openai_error(exc.status, exc.message, code=exc.code.lower())


async def _on_outlive(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, OutliveError)
    status = exc.http_status if 400 <= exc.http_status < 600 else 500
    if status >= 500:
        log.error("internal error on %s %s: %s", request.method, request.url.path, exc)
        return openai_error(status, "The server had an error while processing your request.",
                            type="server_error", code=exc.code.lower())
    return openai_error(status, exc.message, code=exc.code.lower(),
                        type="rate_limit_error" if status == 429 else INVALID,
                        headers=retry_after(exc))


_VALIDATION_CODES = {"missing": "missing_required_parameter",
                     "extra_forbidden": "unknown_parameter"}


async def _on_validation(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    errors = [e for e in exc.errors() if isinstance(e, Mapping)]
    if any(e.get("type") == "json_invalid" for e in errors):
        return openai_error(400, "We could not parse the JSON body of your request.",
                            code="invalid_json")
    if not errors:
        return openai_error(400, "Invalid request.")
    first = errors[0]
    loc = [str(p) for p in first.get("loc", ())]
    if loc and loc[0] in ("body", "query", "path", "header"):
        loc = loc[1:]
    param = ".".join(loc) or None
    kind = str(first.get("type", ""))
    message = str(first.get("msg", "invalid value"))
    if param:
        message = f"Invalid value for '{param}': {message}"
    return openai_error(400, message, param=param,
                        code=_VALIDATION_CODES.get(kind, "invalid_value"))


async def _on_http(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    status = exc.status_code
    if status in (404, 405):
        return openai_error(status, f"Invalid URL ({request.method} {request.url.path})",
                            headers=exc.headers)
    detail = exc.detail if isinstance(exc.detail, str) else "the request was refused"
    if status == 400 and detail == "There was an error parsing the body":
        return openai_error(400, "We could not parse the JSON body of your request.",
                            code="invalid_json")
    return openai_error(status, detail, headers=exc.headers)


async def _on_unexpected(request: Request, exc: Exception) -> JSONResponse:
    log.exception("unhandled error on %s %s", request.method, request.url.path)
    return openai_error(500, "The server had an error while processing your request.",
                        type="server_error")


def install_openai_errors(app: FastAPI) -> None:
    app.add_exception_handler(OpenAIError, _on_openai)
    app.add_exception_handler(StoreUnavailable, _on_store_unavailable)
    app.add_exception_handler(ApiError, _on_api)
    app.add_exception_handler(OutliveError, _on_outlive)
    app.add_exception_handler(RequestValidationError, _on_validation)
    app.add_exception_handler(StarletteHTTPException, _on_http)
    app.add_exception_handler(Exception, _on_unexpected)


class OpenAIBodyLimit(BodyLimit):
    """The body limit of the main API, refusing in OpenAI's shape."""

    def refusal(self) -> JSONResponse:
        return openai_error(413, f"The request body is larger than {self.max_body} bytes.",
                            code="request_too_large", headers={"Connection": "close"})


def not_found(response_id: str, param: str | None = None) -> OpenAIError:
    return OpenAIError(404, f"Response with id '{response_id}' not found.", param=param)


def bad_request(message: str, param: str | None = None, code: str | None = None
                ) -> OpenAIError:
    return OpenAIError(400, message, param=param, code=code)

