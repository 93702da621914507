"""How each kind of failure leaves the OpenAI surface: always OpenAI's error shape, a store
outage as a retryable 503, and never an internal detail."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import httpx
import pytest
from fastapi import FastAPI

from outlive.api._errors import RETRY_AFTER_SECONDS, ApiError
from outlive.api.openai._errors import install_openai_errors
from outlive.domain.errors import NotFound, OutliveError, StoreUnavailable, TooLarge

FAILURES: dict[str, Exception] = {
    "outage": StoreUnavailable("connection refused to 10.0.0.5"),
    "not-found": NotFound("session ses_1 not found"),
    "too-large": TooLarge("text is 100,001 characters"),
    "unauthorized": ApiError(401, "UNAUTHORIZED", "the API key is invalid or revoked"),
    "internal": OutliveError("secret detail"),
    "bug": RuntimeError("secret detail"),
}


def failing(exc: Exception) -> Callable[[], Awaitable[None]]:
    async def fail() -> None:
        raise exc

    return fail


def app() -> FastAPI:
    api = FastAPI()
    install_openai_errors(api)
    for name, exc in FAILURES.items():
        api.add_api_route(f"/{name}", failing(exc))
    return api


@pytest.mark.parametrize(("name", "status", "type_", "code"), [
    ("outage", 503, "server_error", "store_unavailable"),
    ("not-found", 404, "invalid_request_error", "not_found"),
    ("too-large", 413, "invalid_request_error", "too_large"),
    ("unauthorized", 401, "invalid_request_error", "invalid_api_key"),
    ("internal", 500, "server_error", "error"),
    ("bug", 500, "server_error", None),
])
async def test_failures_leave_in_openais_shape(name: str, status: int, type_: str,
                                               code: str | None) -> None:
    transport = httpx.ASGITransport(app=app(), raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
        r = await client.get(f"/{name}")
    assert r.status_code == status
    error = r.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert (error["type"], error["code"]) == (type_, code)
    assert "secret" not in r.text and "10.0.0.5" not in r.text
    assert (r.headers.get("retry-after") == str(RETRY_AFTER_SECONDS)) == (name == "outage")
    assert (r.headers.get("www-authenticate") == "Bearer") == (name == "unauthorized")
