"""The web page's login through a real uvicorn: a random token (never the key or its hash),
expiry, logout and key revocation that end it (open streams included), the cross-origin check
on cookie requests that change something, and the Secure flag over HTTPS via a proxy."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx

from outlive.api import ApiSettings, hash_key
from tests.support.api import Harness, Server
from tests.support.inprocess import make_key


async def logged_in(harness: Harness, server: Server, key: str, **headers: str
                    ) -> httpx.AsyncClient:
    """A client that logged in like the page does (same origin), keeping the cookie."""
    c = harness.client(server, headers={"Origin": server.url, **headers})
    r = await c.post("/v1/login", json={"key": key})
    assert r.status_code == 200, r.text
    return c


def code(r: httpx.Response) -> str:
    body: dict[str, Any] = r.json()
    return str(body["error"]["code"])


async def test_the_cookie_is_a_login_not_the_key_hash_and_logout_ends_it(harness: Harness):
    server = await harness.serve()
    key, _ = await make_key(server.store)
    a = await logged_in(harness, server, key)
    b = await logged_in(harness, server, key)
    token_a, token_b = a.cookies["outlive_session"], b.cookies["outlive_session"]
    assert token_a != token_b and hash_key(key) not in (token_a, token_b)
    assert (await a.get("/v1/sessions")).status_code == 200
    # what a copy of the database holds is no cookie: neither the key hash nor a token hash
    async with httpx.AsyncClient(base_url=server.url) as thief:
        for stolen in (hash_key(key), hash_key(token_a)):
            thief.cookies.set("outlive_session", stolen)
            assert (await thief.get("/v1/sessions")).status_code == 401
    copied = harness.client(server)
    copied.cookies.set("outlive_session", token_a)
    assert (await copied.get("/v1/sessions")).status_code == 200
    assert (await a.post("/v1/logout")).status_code == 200
    assert (await copied.get("/v1/sessions")).status_code == 401  # the copy died with it
    assert (await b.get("/v1/sessions")).status_code == 200  # other logins live on


async def test_logins_expire_when_idle_and_end_with_their_key(harness: Harness):
    server = await harness.serve(ApiSettings(key_cache_ttl=0, login_idle=1.2))
    key, owner = await make_key(server.store)
    c = await logged_in(harness, server, key)
    # Each use slides the idle limit: three uses 0.5 s apart outlive it, and a step may run
    # 0.7 s late on a loaded machine before it would lapse.
    for _ in range(3):
        await asyncio.sleep(0.5)
        assert (await c.get("/v1/sessions")).status_code == 200
    await asyncio.sleep(1.3)
    r = await c.get("/v1/sessions")
    assert r.status_code == 401 and "log in again" in r.json()["error"]["message"]
    c2 = await logged_in(harness, server, key)
    (kid,) = [k.id for k in await server.store.list_api_keys() if k.owner_id == owner.id]
    assert await server.store.revoke_api_key(kid)
    assert (await c2.get("/v1/sessions")).status_code == 401


async def test_open_streams_close_when_the_key_is_revoked_or_the_login_ends(harness: Harness):
    server = await harness.serve(ApiSettings(key_cache_ttl=0.5))
    key, owner = await make_key(server.store)
    bearer = harness.client(server, key)
    sid = (await bearer.post("/v1/sessions", json={"prompt": "hi"})).json()["id"]
    page = await logged_in(harness, server, key)

    loop = asyncio.get_running_loop()

    async def drained(client: httpx.AsyncClient, path: str) -> float:
        """When the server ended the stream (the loop's clock)."""
        async with client.stream("GET", path) as r:
            assert r.status_code == 200
            async for _ in r.aiter_bytes():
                pass
            return loop.time()

    ends = [asyncio.create_task(drained(page, f"/v1/sessions/{sid}/events")),
            asyncio.create_task(drained(page, "/v1/events"))]
    await asyncio.sleep(0.3)
    assert not any(t.done() for t in ends)  # open until the login ends
    cut = loop.time()
    assert (await page.post("/v1/logout")).status_code == 200
    waited = [t - cut for t in await asyncio.wait_for(asyncio.gather(*ends), 5)]
    assert 0 <= min(waited) and max(waited) < 0.5 + 0.6, waited  # in the cache window

    rid = (await bearer.post("/openai/v1/responses",
                             json={"input": "hi", "background": True})).json()["id"]
    ends = [asyncio.create_task(drained(bearer, f"/v1/sessions/{sid}/events")),
            asyncio.create_task(drained(bearer, "/v1/events")),
            asyncio.create_task(drained(bearer, f"/openai/v1/responses/{rid}?stream=true"))]
    await asyncio.sleep(0.3)
    assert not any(t.done() for t in ends)  # open until the key is revoked
    (kid,) = [k.id for k in await server.store.list_api_keys() if k.owner_id == owner.id]
    cut = loop.time()
    assert await server.store.revoke_api_key(kid)
    waited = [t - cut for t in await asyncio.wait_for(asyncio.gather(*ends), 5)]
    assert 0 <= min(waited) and max(waited) < 0.5 + 0.6, waited
    assert server.ctx.hub.stream_counts() == (0, 0)


async def test_cookie_requests_that_change_something_must_come_from_this_origin(
    harness: Harness,
):
    server = await harness.serve()
    key, _ = await make_key(server.store)
    page = await logged_in(harness, server, key)
    sid = (await page.post("/v1/sessions", json={"prompt": "hi"})).json()["id"]
    cookie = page.cookies["outlive_session"]
    other = "http://127.0.0.1:1"  # another port of the same host: same site, other origin
    refusals = [
        {"Origin": other}, {"Origin": "null"}, {"Sec-Fetch-Site": "same-site"},
        {"Sec-Fetch-Site": "cross-site", "Origin": server.url}, {},
    ]
    for headers in refusals:
        c = harness.client(server, headers=headers)
        c.cookies.set("outlive_session", cookie)
        r = await c.post(f"/v1/sessions/{sid}/cancel")
        assert r.status_code == 403 and code(r) == "CROSS_ORIGIN_REQUEST", (headers, r.text)
        assert (await c.get(f"/v1/sessions/{sid}")).status_code == 200  # reads are fine
        assert (await c.post("/v1/login", json={"key": key})).status_code == 403
    assert not (await page.get(f"/v1/sessions/{sid}")).json()["session"]["cancel_requested"]
    same = harness.client(server, headers={"Sec-Fetch-Site": "same-origin"})
    same.cookies.set("outlive_session", cookie)
    assert (await same.patch(f"/v1/sessions/{sid}", json={"title": "t"})).status_code == 200
    # a bearer key is not a browser's ambient credential: no Origin needed
    bearer = harness.client(server, key, headers={"Origin": other})
    assert (await bearer.post(f"/v1/sessions/{sid}/cancel")).status_code == 202


async def test_the_cookie_is_secure_over_https_through_a_trusted_proxy(harness: Harness):
    server = await harness.serve()
    key, _ = await make_key(server.store)
    https = "https://" + server.url.removeprefix("http://")
    # uvicorn trusts X-Forwarded-* from 127.0.0.1 (its --forwarded-allow-ips default)
    c = harness.client(server, headers={"X-Forwarded-Proto": "https", "Origin": https})
    r = await c.post("/v1/login", json={"key": key})
    assert r.status_code == 200 and "secure" in r.headers["set-cookie"].lower()
    plain = harness.client(server, headers={"Origin": server.url})
    r = await plain.post("/v1/login", json={"key": key})
    assert r.status_code == 200 and "secure" not in r.headers["set-cookie"].lower()
