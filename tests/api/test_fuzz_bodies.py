"""Every JSON body the API takes, filled with arbitrary Unicode (lone surrogates, NUL, bidi
controls, zero-width and line-separator characters), sent to a real uvicorn on both databases:
every answer is 2xx or 4xx with a JSON error body, never a 5xx.

Schemathesis (test_schemathesis.py) walks the OpenAPI document; this test aims at what the
document cannot express: text that is valid JSON (`"\\ud800"`) but not valid UTF-8, and values
PostgreSQL refuses where SQLite does not (NUL). Hypothesis runs in a thread with a blocking
client while the server serves in the test's event loop.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from outlive.api import ApiSettings
from tests.support.api import Harness
from tests.support.inprocess import make_key

NASTY = ["\x00", "\ud800", "\udbff", "\udc00", "\udfff", "\u202e", "\u2066", "\u200b",
         "\ufeff", "\u2028", "\x85", "😀", "\\", '"', "\x7f", "\U0010ffff"]
PLAIN = st.text(min_size=1, max_size=20)
TEXT = st.one_of(
    PLAIN,
    st.text(st.sampled_from(NASTY), min_size=1, max_size=6),
    st.text(st.one_of(st.characters(exclude_categories=()), st.sampled_from(NASTY)),
            max_size=30),
)
JSON: st.SearchStrategy[Any] = st.recursive(
    st.none() | st.booleans() | st.integers(-2**70, 2**70)
    | st.floats(allow_nan=False, allow_infinity=False) | TEXT,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(TEXT, inner, max_size=4),
    max_leaves=12,
)
FIELD_VALUE = st.one_of(TEXT, JSON)


ABANDON = st.one_of(st.floats(), st.integers(-10, 10**7), st.just(1e300))
METADATA = st.dictionaries(TEXT, JSON, min_size=1, max_size=4)
SESSION = {"prompt": TEXT, "title": TEXT, "agent": st.one_of(TEXT, st.just("demo")),
           "model": st.one_of(TEXT, st.just("demo:scripted")), "metadata": METADATA,
           "abandon_after": ABANDON, "end_user": TEXT}
MESSAGE = {"text": TEXT, "mode": st.sampled_from(["steer", "queue", "interrupt", "reject"]),
           "client_request_id": TEXT}
RESPONSE = {"input": st.one_of(TEXT, st.lists(st.fixed_dictionaries(
                {"role": st.sampled_from(["user", "system"]), "content": TEXT}), max_size=2)),
            "model": st.one_of(TEXT, st.just("demo")), "instructions": TEXT,
            "metadata": st.dictionaries(TEXT, TEXT, min_size=1, max_size=3)}
TOKEN = {"end_user": TEXT, "session_id": TEXT,
         "scopes": st.lists(st.one_of(TEXT, st.sampled_from(
             ["read", "write", "cancel", "approve", "tools"])), max_size=6),
         "ttl": st.one_of(st.integers(-10, 2**70), st.floats(), TEXT)}
ENDPOINTS: list[tuple[str, str, dict[str, Any], dict[str, st.SearchStrategy[Any]]]] = [
    ("POST", "/v1/sessions", {"prompt": "hi"}, SESSION),
    ("PATCH", "/v1/sessions/{id}", {"title": "t"}, {"title": TEXT}),
    ("POST", "/v1/sessions/{id}/messages", {"text": "hi", "mode": "queue"}, MESSAGE),
    ("POST", "/v1/sessions/{id}/fork", {"at_seq": 1}, {
        "at_seq": st.one_of(st.integers(-10, 2**70), JSON), "prompt": TEXT,
        "before_message": st.one_of(st.integers(-10, 2**70), JSON)}),
    ("POST", "/v1/sessions/{id}/messages/1/edit", {"text": "hi"}, {"text": TEXT}),
    ("POST", "/v1/login", {"key": "olk_x"}, {"key": TEXT}),
    ("POST", "/v1/tokens", {"end_user": "a", "scopes": ["read"]}, TOKEN),
    # no worker here, so never a foreground request (it would wait for the run)
    ("POST", "/openai/v1/responses", {"input": "hi", "background": True}, RESPONSE),
]


def bodies(valid: dict[str, Any], field: str, kind: st.SearchStrategy[Any]
           ) -> st.SearchStrategy[dict[str, Any]]:
    """A valid body whose `field` holds a generated value (mostly of its own kind, sometimes
    any JSON), so that value is what the server has to handle, not a field it refuses first;
    now and then with a field of an arbitrary name too."""
    return st.tuples(st.one_of(kind, kind, kind, FIELD_VALUE),
                     st.one_of(st.just({}), st.just({}), st.dictionaries(TEXT, JSON, max_size=1))
                     ).map(lambda vx: {**vx[1], **valid, field: vx[0]})


def fuzz_one(client: httpx.Client, method: str, path: str,
             strategy: st.SearchStrategy[dict[str, Any]], problems: list[str]) -> None:

    @settings(max_examples=25, deadline=None, derandomize=True, database=None,
              suppress_health_check=list(HealthCheck))
    @given(strategy)
    def send(b: dict[str, Any]) -> None:
        raw = json.dumps(b)  # ASCII: a lone surrogate travels as a valid \\ud800 escape
        r = client.request(method, path, content=raw)
        if r.status_code >= 500 or r.status_code < 200 or 300 <= r.status_code < 400:
            problems.append(f"{method} {path} {raw[:300]} -> {r.status_code} {r.text}")
        elif r.status_code >= 400:
            assert "error" in r.json(), r.text

    send()


def fuzz(url: str, key: str, session_id: str) -> list[str]:
    problems: list[str] = []
    with httpx.Client(base_url=url, timeout=10,
                      headers={"Authorization": f"Bearer {key}", "Origin": url,
                               "Content-Type": "application/json"}) as client:
        for method, path, valid, fields in ENDPOINTS:
            for field, kind in fields.items():
                fuzz_one(client, method, path.replace("{id}", session_id),
                         bodies(valid, field, kind), problems)
    return problems


async def test_arbitrary_unicode_in_every_body_gives_no_5xx(harness: Harness):
    # failed logins are part of the fuzz: no limit, so every body reaches its handler
    server = await harness.serve(ApiSettings(auth_fail_limit=1_000_000))
    key, _ = await make_key(server.store)
    client = harness.client(server, key)
    sid = (await client.post("/v1/sessions", json={"prompt": "fuzz me"})).json()["id"]
    problems = await asyncio.to_thread(fuzz, server.url, key, sid)
    assert not problems, "\n".join(problems[:10])
    # and the server is still fine
    assert (await client.get(f"/v1/sessions/{sid}")).status_code == 200
