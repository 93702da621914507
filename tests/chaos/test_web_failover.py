"""The workbench behind a front door, when the API host behind it loses the database
(docs/deploy.md §4a): two `outlive serve --no-worker` hosts and a worker host in network
namespaces of their own (tests/support/hosts.py), and a front door, a `TcpProxy` in the root
namespace, which the browser talks to (same origin) and which forwards to API host 1.

The page streams a "run long" session; API host 1's database link is cut. Its session stream
ends (`: stream ended: store_unavailable`), the page's probe before reconnecting gets `503
STORE_UNAVAILABLE`, and the top bar says the server lost its database. The front door's
health check (`/healthz`, 503 now) takes host 1 out: the test retargets the proxy to API host
2, as a load balancer would. Without a reload the page resumes its streams from its cursor
there and the transcript goes on to the end; after a reload it comes back whole. Both times
the transcript is exactly what the stored log (`GET /v1/sessions/{id}/events`) assembles:
nothing lost, nothing shown twice.

Root only (network namespaces) and Chromium (tests/support/browser.py). About 20–30 s.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from tests.support.browser import BROWSER_ARGS, Browser, browser_path, checked, require_browser
from tests.support.chaos import create_key
from tests.support.hosts import TestBed
from tests.support.processes import postgres_url, tail
from tests.support.tcpproxy import TcpProxy
from tests.support.waiting import eventually

require_browser()

from playwright.async_api import Page, async_playwright, expect  # noqa: E402

from tests.support.pages import (  # noqa: E402
    FAST_HEALTH,
    expect_status,
    expect_transcript_back,
    page_state,
    transcript_texts,
    wait_streaming,
)

pytestmark = pytest.mark.slow

SPEED = 3.0
"""Demo speed: "run long" streams for about 10 s, so it is still going when the page has
moved to API host 2."""
STORE_LOST = "The server lost its database; reconnecting…"



@pytest.fixture
async def browser() -> AsyncIterator[Browser]:
    async with async_playwright() as pw:
        chromium = await pw.chromium.launch(executable_path=browser_path(), args=BROWSER_ARGS)
        try:
            async with checked(chromium) as b:
                yield b
        finally:
            await chromium.close()


async def _stored(api: httpx.AsyncClient, sid: str) -> list[dict[str, Any]]:
    """The session's whole stored log, page by page (JSON)."""
    events: list[dict[str, Any]] = []
    while True:
        r = await api.get(f"/v1/sessions/{sid}/events",
                          params={"after": events[-1]["seq"] if events else 0, "limit": 1000},
                          headers={"Accept": "application/json"})
        r.raise_for_status()
        page = r.json()["events"]
        if not page:
            return events
        events += page


async def _assert_whole(page: Page, api: httpx.AsyncClient, sid: str) -> dict[str, Any]:
    """The page shows exactly what the stored log holds: its state is the server's snapshot
    (same seq, same items), and its assistant text is the log's text deltas joined, once."""
    events = await _stored(api, sid)
    r = await api.get(f"/v1/sessions/{sid}")
    r.raise_for_status()
    server = r.json()["snapshot"]["state"]
    assert server["seq"] == events[-1]["seq"] == len(events)  # gapless, from 1

    async def caught_up() -> bool:
        state = await page_state(page)
        return state is not None and state["seq"] == server["seq"]

    await eventually(caught_up, 20, 0.1, "the page catching up with the stored log")
    assert await page_state(page) == server
    await page.wait_for_timeout(100)  # one animation frame for the last render
    dom = await transcript_texts(page)
    deltas = "".join(e["data"]["text"] for e in events if e["type"] == "text_delta")
    assert "".join(dom["assistant"]) == deltas
    assert dom["assistant"] == [i["text"] for i in server["items"] if i["kind"] == "assistant"]
    assert dom["user"] == [i["text"] for i in server["items"] if i["kind"] == "user"]
    assert dom["assistant"] and dom["user"]
    return server


async def test_the_workbench_resumes_on_the_other_api_host(chaos_db: str, bed: TestBed,
                                                           browser: Browser) -> None:
    t0 = time.monotonic()
    key = create_key(postgres_url(chaos_db), "webfailover")
    h1, h2, hw = [await bed.host(n) for n in ("api1", "api2", "w")]
    api1, api2 = h1.api("--log-level", "WARNING"), h2.api("--log-level", "WARNING")
    worker = hw.worker("--backstop", "0.5", speed=SPEED)
    await api1.ready()
    await api2.ready()
    await worker.ready()
    front = await TcpProxy(api1.port, h1.addr).start()
    auth = {"Authorization": f"Bearer {key}"}
    async with httpx.AsyncClient(base_url=front.url, headers=auth, timeout=10) as door, \
            httpx.AsyncClient(base_url=api2.url, headers=auth, timeout=10) as direct:
        try:
            r = await door.post("/v1/sessions", json={"prompt": "run long"})
            assert r.status_code == 202, r.text
            sid = r.json()["id"]

            page, _ = await browser.new_page()
            await page.goto(f"{front.url}/{FAST_HEALTH}#/s/{sid}")
            await page.get_by_test_id("login-key").fill(key)
            await page.get_by_test_id("login").click()
            await expect_transcript_back(page)
            await wait_streaming(page)
            banner = page.get_by_test_id("store-banner")
            await expect(banner).to_be_hidden()

            t_cut = time.monotonic()
            h1.cut()
            await expect(banner).to_have_text(STORE_LOST, timeout=20_000)
            told = time.monotonic() - t_cut
            await expect(page.get_by_test_id("session-link")).to_have_text("reconnecting…")
            # What the front door's health check sees, before it takes host 1 out.
            assert (await door.get("/healthz")).status_code == 503
            seen = await page_state(page)
            assert seen is not None
            r = await direct.get(f"/v1/sessions/{sid}")
            assert r.json()["session"]["status"] == "running", "finished before the failover"
            at_move = r.json()["snapshot"]["state"]["seq"]

            t_move = time.monotonic()
            front.retarget(api2.port, h2.addr)
            await expect(banner).to_be_hidden(timeout=20_000)
            await expect(page.get_by_test_id("session-link")).to_have_text("", timeout=20_000)
            resumed = time.monotonic() - t_move
            # (a) without a reload: the transcript goes on, from the other host, to the end.
            await expect_status(page, "succeeded")
            state = await _assert_whole(page, direct, sid)
            assert state["seq"] > seen["seq"]
            refusals = await page.evaluate(
                "async () => (await import('/web/store_status.js')).storeRefusals()")
            assert refusals >= 1

            # (b) after a reload, through the front door (now on host 2): whole again.
            await page.reload()
            await expect_transcript_back(page)
            await expect_status(page, "succeeded")
            await _assert_whole(page, direct, sid)
            await expect(banner).to_be_hidden()
            print(f"[web failover] banner {told:.1f}s after the cut, streams back "
                  f"{resumed:.1f}s after the front door moved, page seq {seen['seq']} -> "
                  f"{state['seq']} (the log at {at_move} when it moved), "
                  f"total {time.monotonic() - t0:.1f}s")
        except BaseException:
            print(tail(api1.log(), 30), tail(api2.log(), 30), sep="\n")
            raise
        finally:
            await front.close()
            h1.heal()
