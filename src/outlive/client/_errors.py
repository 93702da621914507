"""What the client raises: `ApiError` (the server answered with an error) and its subclasses
by HTTP status, `TransportError` (no usable answer), `ProtocolError` (an answer that is not
what the API promises). All derive from `ClientError`.

Every API error body is `{"error": {"code", "message", ...}}`; the extra fields land in
`details` (e.g. `status` of SESSION_ALREADY_TERMINAL, `errors` of VALIDATION_ERROR).
"""

from __future__ import annotations

import json
from typing import Any

import httpx

__all__ = [
    "ApiError",
    "BadRequestError",
    "ClientError",
    "ConflictError",
    "ForbiddenError",
    "NotFoundError",
    "PayloadTooLargeError",
    "ProtocolError",
    "RateLimitedError",
    "ServerError",
    "TransportError",
    "UnauthorizedError",
    "ValidationFailedError",
    "api_error",
    "error_from_response",
    "is_transient",
]


class ClientError(Exception):
    """Base of everything `outlive.client` raises on purpose."""


class TransportError(ClientError):
    """The request got no HTTP answer (refused, reset, timed out, DNS…)."""


class ProtocolError(ClientError):
    """The server's answer does not have the shape the API promises."""


class ApiError(ClientError):
    """The server answered with an error status and (normally) a JSON error body."""

    def __init__(
        self, status: int, code: str, message: str, details: dict[str, Any] | None = None
    ) -> None:
        super().__init__(f"{status} {code}: {message}")
        self.status = status
        self.code = code
        self.message = message
        self.details: dict[str, Any] = dict(details or {})


class BadRequestError(ApiError):
    """400: invalid input, unknown agent or model route, bad cursor."""


class UnauthorizedError(ApiError):
    """401: missing, invalid or revoked API key."""


class ForbiddenError(ApiError):
    """403."""


class NotFoundError(ApiError):
    """404: no such session for this owner (missing and foreign look the same)."""


class ConflictError(ApiError):
    """409: SESSION_BUSY (mode reject), SESSION_ALREADY_TERMINAL (`details["status"]`)…"""


class PayloadTooLargeError(ApiError):
    """413: text over 100,000 characters or a body over the limit."""


class ValidationFailedError(ApiError):
    """422: the request failed validation; `details["errors"]` says where."""


class RateLimitedError(ApiError):
    """429."""


class ServerError(ApiError):
    """5xx: the server (or a proxy in front of it) failed; retrying may work."""


_BY_STATUS: dict[int, type[ApiError]] = {
    400: BadRequestError,
    401: UnauthorizedError,
    403: ForbiddenError,
    404: NotFoundError,
    409: ConflictError,
    413: PayloadTooLargeError,
    422: ValidationFailedError,
    429: RateLimitedError,
}


def error_from_response(status: int, body: bytes, reason: str = "") -> ApiError:
    """The ApiError for an error answer; bodies that are not the API's shape (a proxy's HTML
    page) still give a usable error with code `HTTP_<status>`."""
    code, message, details = f"HTTP_{status}", reason or f"HTTP {status}", {}
    try:
        parsed = json.loads(body) if body else None
    except ValueError:
        parsed = None
    err = parsed.get("error") if isinstance(parsed, dict) else None
    if isinstance(err, dict):
        code = str(err.get("code") or code)
        message = str(err.get("message") or message)
        details = {k: v for k, v in err.items() if k not in ("code", "message")}
    elif body and parsed is None:
        text = body[:200].decode("utf-8", "replace").strip()
        if text:
            message = f"{message}: {text}"
    cls = _BY_STATUS.get(status, ServerError if status >= 500 else ApiError)
    return cls(status, code, message, details)


def api_error(response: httpx.Response) -> ApiError:
    """`error_from_response` for a response whose body has been read."""
    return error_from_response(response.status_code, response.content, response.reason_phrase)


def is_transient(exc: BaseException) -> bool:
    """Whether trying again later may work: network trouble, a dropped stream, 5xx, 408, 429.
    Everything else (401, 404, 400…) will fail the same way again."""
    if isinstance(exc, TransportError | ProtocolError | httpx.TransportError):
        return True
    if isinstance(exc, ApiError):
        return exc.status >= 500 or exc.status in (408, 429)
    return False
