"""Bearer keys, the login cookie, revocation and the key helpers."""

from __future__ import annotations

import asyncio
import hashlib
import re

import httpx

from outlive.api import ApiSettings, hash_key, new_key
from tests.support.api import Api, Harness
from tests.support.inprocess import make_key


def unauthorized(r: httpx.Response) -> None:
    assert r.status_code == 401, r.text
    assert r.json()["error"]["code"] == "UNAUTHORIZED"
    assert r.headers["www-authenticate"] == "Bearer"


def test_key_helpers():
    k = new_key()
    assert re.fullmatch(r"olk_[A-Za-z0-9_-]{32}", k)
    assert new_key() != k
    assert hash_key(k) == hashlib.sha256(k.encode()).hexdigest()


async def test_missing_invalid_and_malformed_keys(idle_api: Api, harness: Harness):
    url = idle_api.server.url
    async with httpx.AsyncClient(base_url=url) as anon:
        for method, path in [
            ("GET", "/v1/sessions"), ("POST", "/v1/sessions"), ("GET", "/v1/sessions/x"),
            ("GET", "/v1/sessions/x/events"), ("GET", "/v1/events"),
            ("POST", "/v1/sessions/x/cancel"),
        ]:
            unauthorized(await anon.request(method, path))
        unauthorized(await anon.get("/v1/sessions", headers={"Authorization": "Bearer nope"}))
        unauthorized(await anon.get("/v1/sessions", headers={"Authorization": "Bearer"}))
        unauthorized(await anon.get(
            "/v1/sessions", headers={"Authorization": f"Basic {idle_api.key}"}))
        unauthorized(await anon.get(
            "/v1/sessions", headers={"Authorization": f"Bearer {hash_key(idle_api.key)}"}))
        # the header decides even when a valid cookie is also sent
        anon.cookies.set("outlive_session", hash_key(idle_api.key))
        unauthorized(await anon.get("/v1/sessions", headers={"Authorization": "Bearer bad"}))
        assert (await anon.get("/healthz")).status_code == 200
        assert (await anon.get("/metrics")).status_code == 401  # needs the metrics token


async def test_revoked_key_stops_working_within_the_cache_ttl(harness: Harness):
    server = await harness.serve(ApiSettings(key_cache_ttl=0.3))
    key, owner = await make_key(server.store)
    c = harness.client(server, key)
    assert (await c.get("/v1/sessions")).status_code == 200
    (kid,) = [k.id for k in await server.store.list_api_keys() if k.owner_id == owner.id]
    assert await server.store.revoke_api_key(kid)
    await asyncio.sleep(0.4)
    unauthorized(await c.get("/v1/sessions"))


async def test_lookups_are_cached(harness: Harness):
    server = await harness.serve(ApiSettings(key_cache_ttl=30))
    key, _ = await make_key(server.store)
    c = harness.client(server, key)
    calls = 0
    original = server.store.owner_for_key

    async def counting(key_hash: str):
        nonlocal calls
        calls += 1
        return await original(key_hash)

    server.store.owner_for_key = counting  # type: ignore[method-assign]
    for _ in range(5):
        assert (await c.get("/v1/sessions")).status_code == 200
    assert calls == 1


async def test_cookie_login_and_logout(idle_api: Api):
    url = idle_api.server.url
    async with httpx.AsyncClient(base_url=url, headers={"Origin": url}) as browser:
        unauthorized(await browser.post("/v1/login", json={"key": "olk_wrong"}))
        r = await browser.post("/v1/login", json={"key": idle_api.key})
        assert r.status_code == 200 and r.json() == {"ok": True, "owner": idle_api.owner.name}
        cookie = r.headers["set-cookie"]
        token = cookie.split(";")[0].removeprefix("outlive_session=")
        assert re.fullmatch(r"[A-Za-z0-9_-]{43}", token)
        assert idle_api.key not in cookie and hash_key(idle_api.key) not in cookie
        lowered = cookie.lower()
        assert "httponly" in lowered and "samesite=strict" in lowered and "path=/" in lowered
        assert "secure" not in lowered and "max-age=2592000" in lowered
        r = await browser.post("/v1/sessions", json={"prompt": "from the page"})
        assert r.status_code == 202
        assert (await browser.get(f"/v1/sessions/{r.json()['id']}")).status_code == 200
        r = await browser.post("/v1/logout")
        assert r.status_code == 200 and "outlive_session=" in r.headers["set-cookie"]
        unauthorized(await browser.get("/v1/sessions"))
        browser.cookies.set("outlive_session", token)  # logout ended it in the store
        unauthorized(await browser.get("/v1/sessions"))
        browser.cookies.set("outlive_session", hash_key(idle_api.key))  # nor the key's hash
        unauthorized(await browser.get("/v1/sessions"))
        browser.cookies.set("outlive_session", idle_api.key)  # the key itself is not a cookie
        unauthorized(await browser.get("/v1/sessions"))


async def test_secure_cookie_setting(harness: Harness):
    server = await harness.serve(ApiSettings(cookie_secure=True))
    key, _ = await make_key(server.store)
    async with httpx.AsyncClient(base_url=server.url, headers={"Origin": server.url}) as browser:
        r = await browser.post("/v1/login", json={"key": key})
        assert "secure" in r.headers["set-cookie"].lower()
        r = await browser.post("/v1/login", json={})
        assert r.status_code == 422
