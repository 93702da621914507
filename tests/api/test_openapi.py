"""The OpenAPI document loads and describes every endpoint with its bodies and errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.api import Api

ENDPOINTS = {
    ("/v1/sessions", "post"): {"202", "400", "401", "404", "413", "422"},
    ("/v1/sessions", "get"): {"200", "400", "401", "422"},
    ("/v1/sessions/{session_id}", "get"): {"200", "401", "404"},
    ("/v1/sessions/{session_id}", "patch"): {"200", "400", "401", "404", "422"},
    ("/v1/sessions/{session_id}", "delete"): {"202", "401", "404"},
    ("/v1/sessions/{session_id}/messages", "post"): {"202", "400", "401", "404", "409", "413"},
    ("/v1/sessions/{session_id}/cancel", "post"): {"202", "401", "404", "409"},
    ("/v1/sessions/{session_id}/compact", "post"): {"202", "401", "404", "409"},
    ("/v1/sessions/{session_id}/events", "get"): {"200", "400", "401", "404"},
    ("/v1/sessions/{session_id}/approvals", "get"): {"200", "401", "404"},
    ("/v1/sessions/{session_id}/usage", "get"): {"200", "401", "404"},
    ("/v1/usage", "get"): {"200", "400", "401", "422"},
    ("/v1/tokens", "post"): {"201", "400", "401", "403", "404", "422", "503"},
    ("/v1/budget", "get"): {"200", "401"},
    ("/v1/budget", "put"): {"200", "400", "401", "422"},
    ("/v1/sessions/{session_id}/approvals/{approval_id}", "post"): {
        "200", "400", "401", "404", "409", "422"},
    ("/v1/sessions/{session_id}/tool-calls", "get"): {"200", "401", "404", "422"},
    ("/v1/sessions/{session_id}/tool-results", "post"): {
        "200", "400", "401", "404", "409", "422"},
    ("/v1/events", "get"): {"200", "400", "401"},
    ("/v1/login", "post"): {"200", "401", "422"},
    ("/v1/logout", "post"): {"200"},
    ("/healthz", "get"): {"200", "503"},
    ("/metrics", "get"): {"200"},
    ("/v1/meta", "get"): {"200", "401"},
    ("/v1/webhooks", "post"): {"201", "400", "401", "422"},
    ("/v1/webhooks", "get"): {"200", "401"},
    ("/v1/webhooks/{webhook_id}", "delete"): {"200", "401", "404"},
    ("/v1/webhooks/{webhook_id}/deliveries", "get"): {"200", "401", "404", "422"},
    ("/v1/sessions/{session_id}/scheduled", "get"): {"200", "401", "404", "422"},
    ("/v1/sessions/{session_id}/scheduled/{message_id}", "delete"): {"200", "401", "404",
                                                                         "422"},
    ("/v1/schedules", "post"): {"201", "400", "401", "404", "409", "413", "422"},
    ("/v1/schedules", "get"): {"200", "400", "401", "422"},
    ("/v1/schedules/{schedule_id}", "get"): {"200", "401", "404"},
    ("/v1/schedules/{schedule_id}", "delete"): {"200", "401", "404"},
    ("/v1/schedules/{schedule_id}/pause", "post"): {"200", "401", "404"},
    ("/v1/schedules/{schedule_id}/resume", "post"): {"200", "401", "404"},
    ("/v1/schedules/{schedule_id}/runs", "get"): {"200", "400", "401", "404", "422"},
    ("/v1/sessions/{session_id}/fork", "post"): {"201", "400", "401", "404", "413", "422"},
    ("/v1/sessions/{session_id}/messages/{seq}/edit", "post"): {"201", "400", "401", "404",
                                                                 "413", "422"},
    ("/v1/sessions/{session_id}/regenerate", "post"): {"201", "400", "401", "404", "422"},
    ("/v1/sessions/{session_id}/branches", "get"): {"200", "401", "404", "422"},
}


@pytest.fixture(params=["sqlite"])
def db_url(request, tmp_path) -> str:  # one database is enough for the document
    return f"sqlite:///{tmp_path / 'outlive.db'}"


async def test_openapi_lists_every_endpoint(idle_api: Api):
    r = await idle_api.client.get("/openapi.json")
    assert r.status_code == 200
    doc = r.json()
    assert doc["openapi"].startswith("3.")
    paths = doc["paths"]
    listed = {(p, m) for p, ops in paths.items() for m in ops}
    assert listed == set(ENDPOINTS)
    schemas = doc["components"]["schemas"]
    assert "HTTPValidationError" not in schemas  # 422s use our error body
    for (path, method), statuses in ENDPOINTS.items():
        op = paths[path][method]
        assert statuses <= set(op["responses"]), (path, method, set(op["responses"]))
        for status, resp in op["responses"].items():
            if status.startswith(("4", "5")):
                ref = resp["content"]["application/json"]["schema"]["$ref"]
                assert ref == "#/components/schemas/ErrorResponse", (path, method, status)
    assert paths["/v1/sessions"]["post"]["requestBody"]["content"]["application/json"][
        "schema"]["$ref"].endswith("/CreateSession")
    create = schemas["CreateSession"]
    assert create["required"] == ["prompt"]
    assert create["properties"]["prompt"]["maxLength"] == 100_000
    assert create["additionalProperties"] is False
    assert set(schemas["SessionOut"]["required"]) == {
        "id", "agent", "model", "title", "title_state", "status", "stage", "attempt",
        "last_seq", "error", "created_at", "updated_at", "metadata", "cancel_requested",
        "abandon_after", "usage",
    }
    session = schemas["SessionOut"]["properties"]
    assert session["usage"]["$ref"].endswith("/UsageTotalsOut")
    assert schemas["UsageTotalsOut"]["properties"]["cost_usd"]["type"] == "string"
    assert session["compact_requested"]["type"] == "boolean"
    assert {"$ref": "#/components/schemas/ContextOut"} in session["context"]["anyOf"]
    assert set(schemas["ContextOut"]["required"]) == {"tokens", "window"}
    compact = paths["/v1/sessions/{session_id}/compact"]["post"]["responses"]["202"]
    assert compact["content"]["application/json"]["schema"]["$ref"].endswith("/SessionOut")
    events = paths["/v1/sessions/{session_id}/events"]["get"]["responses"]["200"]["content"]
    assert set(events) == {"application/json", "text/event-stream"}
    assert events["application/json"]["schema"]["$ref"].endswith("/EventsPage")
    params = {p["name"] for p in paths["/v1/sessions/{session_id}/events"]["get"]["parameters"]}
    assert {"after", "limit", "until", "Last-Event-ID"} <= params
    assert {"bearer", "cookie"} <= {
        k.lower().replace("httpbearer", "bearer").replace("apikeycookie", "cookie")
        for k in doc["components"]["securitySchemes"]
    }


def _http_api_doc() -> str:
    return (Path(__file__).resolve().parents[2] / "docs" / "http-api.md").read_text()


async def test_http_api_doc_lists_every_endpoint(idle_api: Api):
    """docs/http-api.md is the hand-written reference: a route added without it fails here."""
    doc = _http_api_doc()
    paths = (await idle_api.client.get("/openapi.json")).json()["paths"]
    missing = [
        f"{method.upper()} {path}"
        for path, ops in paths.items()
        for method in ops
        if f"`{method.upper()} {path.replace('{session_id}', '{id}')}`" not in doc
    ]
    assert not missing, f"not in docs/http-api.md: {missing}"
