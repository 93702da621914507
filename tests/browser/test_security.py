"""The page's security in a real Chromium: a form on another port of the same host (same
site, so the SameSite=Strict cookie rides along) cannot change anything with the login
cookie, while the page's own requests can; and the router survives a session id of `.`.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from fastapi import FastAPI
from fastapi.responses import HTMLResponse

from tests.support.browser import LOOP, Browser, StackFactory, require_browser, serving

require_browser()
pytestmark = LOOP

from playwright.async_api import expect  # noqa: E402

from tests.support.pages import create_via_api, login  # noqa: E402


@contextlib.asynccontextmanager
async def attacker_page(target: str) -> AsyncIterator[str]:
    """A page on another port of 127.0.0.1 that posts a form to `target` on load."""
    app = FastAPI()

    @app.get("/")
    async def page() -> HTMLResponse:
        return HTMLResponse(f'<form method="post" action="{target}"><input name="x" '
                            'value="1"></form><script>document.forms[0].submit()</script>')

    async with serving(app) as origin:
        yield origin + "/"


async def test_a_form_on_another_port_cannot_cancel_with_the_login_cookie(
    stacks: StackFactory, browser: Browser
) -> None:
    stack = await stacks(speed=1)
    key = await stack.new_key("alice")
    sid = await create_via_api(stack, key, "run long")
    page, _ = await browser.new_page()
    await login(page, stack, key)
    async with attacker_page(f"{stack.base_url}/v1/sessions/{sid}/cancel") as evil:
        other = await page.context.new_page()  # same browser profile: the cookie is there
        async with other.expect_navigation(url=f"{stack.base_url}/**"):
            await other.goto(evil)
        assert "CROSS_ORIGIN_REQUEST" in await other.content()
        await other.close()
    session = (await stack.snapshot(key, sid))["session"]
    assert not session["cancel_requested"] and session["status"] in ("queued", "running")
    # the page's own request, with the same cookie, is accepted
    status = await page.evaluate(
        "async (sid) => (await fetch(`/v1/sessions/${sid}/cancel`, {method: 'POST'})).status",
        sid)
    assert status == 202
    assert (await stack.snapshot(key, sid))["session"]["cancel_requested"]


async def test_the_router_treats_a_session_id_of_dot_as_not_found(
    stacks: StackFactory, browser: Browser
) -> None:
    stack = await stacks(speed=0)
    key = await stack.new_key("bob")
    page, _ = await browser.new_page()
    await login(page, stack, key, hash_="#/s/.")
    await expect(page.get_by_test_id("not-found")).to_be_visible()
    for odd in ("..", "%2E", "a.b"):
        await page.evaluate("(h) => { location.hash = h; }", f"#/s/{odd}")
        await expect(page.get_by_test_id("not-found")).to_be_visible()
    # a real session still opens after that
    sid = await create_via_api(stack, key, "hello")
    await page.evaluate("(h) => { location.hash = h; }", f"#/s/{sid}")
    await expect(page.get_by_test_id("not-found")).to_be_hidden()
