"""CORS for browser tokens over a real server (docs/end-users.md): only a configured origin,
only the token routes, preflights answered with what a token's requests send, the headers a
stream's resume needs exposed, never credentials; an unconfigured origin gets no CORS header,
and a server without origins answers CORS to no one."""

from __future__ import annotations

import dataclasses

import pytest

from outlive.api import ApiSettings
from tests.support.api import FAST, Api
from tests.support.inprocess import make_key

ALLOWED = "http://127.0.0.1:5173"
OTHER = "http://127.0.0.1:5174"


@pytest.fixture
async def cors_api(harness) -> Api:
    server = await harness.serve(dataclasses.replace(FAST, cors_origins=(ALLOWED + "/",)))
    key, owner = await make_key(server.store)
    return Api(harness, server, key, owner, harness.client(server, key))


def _preflight(origin: str, method: str = "POST") -> dict[str, str]:
    return {"Origin": origin, "Access-Control-Request-Method": method,
            "Access-Control-Request-Headers": "authorization, content-type"}


async def test_a_configured_origin_gets_cors_on_the_token_routes(cors_api: Api):
    anon = cors_api.harness.client(cors_api.server)
    for path in ("/v1/sessions", "/ai-sdk/chat", "/ag-ui", "/openai/v1/responses",
                 "/ag-ui/t/runs/r/events"):
        r = await anon.options(path, headers=_preflight(ALLOWED))
        assert r.status_code == 204, (path, r.text)
        assert r.headers["access-control-allow-origin"] == ALLOWED
        assert "authorization" in r.headers["access-control-allow-headers"]
        assert "last-event-id" in r.headers["access-control-allow-headers"]
        assert "POST" in r.headers["access-control-allow-methods"]
        assert "access-control-allow-credentials" not in r.headers
        assert r.headers["vary"] == "Origin"
    s = await cors_api.create("hi")
    r = await cors_api.client.get(f"/v1/sessions/{s['id']}", headers={"Origin": ALLOWED})
    assert r.status_code == 200 and r.headers["access-control-allow-origin"] == ALLOWED
    exposed = r.headers["access-control-expose-headers"]
    for header in ("x-outlive-session-id", "x-workflow-run-id", "retry-after"):
        assert header in exposed
    assert "access-control-allow-credentials" not in r.headers


async def test_other_origins_and_other_routes_get_no_cors(cors_api: Api):
    anon = cors_api.harness.client(cors_api.server)
    r = await anon.options("/v1/sessions", headers=_preflight(OTHER))
    assert "access-control-allow-origin" not in r.headers
    r = await cors_api.client.get("/v1/sessions", headers={"Origin": OTHER})
    assert r.status_code == 200 and "access-control-allow-origin" not in r.headers
    for path in ("/healthz", "/", "/v1x", "/metrics"):
        r = await anon.get(path, headers={"Origin": ALLOWED})
        assert "access-control-allow-origin" not in r.headers, path
    r = await anon.options("/v1/sessions", headers={**_preflight(OTHER), "Origin": "null"})
    assert "access-control-allow-origin" not in r.headers
    r = await anon.get("/v1/sessions", headers=[(b"origin", b"http://\xff")])
    assert r.status_code == 401 and "access-control-allow-origin" not in r.headers


async def test_a_server_without_origins_answers_cors_to_no_one(idle_api: Api):
    anon = idle_api.harness.client(idle_api.server)
    r = await anon.options("/v1/sessions", headers=_preflight(ALLOWED))
    assert r.status_code == 204 and "access-control-allow-origin" not in r.headers


def test_an_origin_must_be_scheme_host_and_port():
    for bad in ("app.example", "https://app.example/path", "ftp://x", "https://", "*"):
        with pytest.raises(ValueError, match="CORS origin"):
            ApiSettings(cors_origins=(bad,))
    assert ApiSettings(cors_origins=("https://[::1]:8443",)).cors_origins
