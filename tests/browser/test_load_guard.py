"""A page whose own code failed to load says so and reloads (web/load_guard.js).

What CI saw, three times: Chromium fails the requests it has in flight with
`ERR_NETWORK_CHANGED` when the machine's addresses change (the partition tests' veth links,
made beside the browser tests), and a module that fails to load leaves the workbench blank,
neither login nor app, with nothing in the page able to say so. Here the same happens on
purpose: the server holds the page's modules until a real address change (a veth link with an
address, this test's own) has failed one, and the page must reload by itself and reach its
login form.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
from collections.abc import Iterator
from typing import Any

from playwright.async_api import expect

from tests.support.browser import LOOP, Browser, StackFactory
from tests.support.hosts import require_root
from tests.support.pages import expect_login_form
from tests.support.waiting import eventually

pytestmark = LOOP

GUARD = "/web/load_guard.js"
SOCKETS_PER_ORIGIN = 6
"""Chromium's connections per origin over HTTP/1.1."""


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True)


@contextlib.contextmanager
def address_change() -> Iterator[None]:
    """A veth pair with an address for the block, as the partition tests' links are made
    (this kernel has no dummy interfaces): the kernel announces the new address, and its
    removal after."""
    name = f"oltnc{os.getpid() % 10000}"
    _ip("link", "add", name, "type", "veth", "peer", "name", f"{name}p")
    try:
        _ip("addr", "add", f"10.253.{os.getpid() % 250}.1/32", "dev", name)
        _ip("link", "set", f"{name}p", "up")  # both ends up: a link with carrier, running
        _ip("link", "set", name, "up")
        yield
    finally:
        subprocess.run(["ip", "link", "del", name], capture_output=True)


async def test_a_page_whose_code_failed_to_load_reloads_and_boots(
    stacks: StackFactory, browser: Browser
) -> None:
    require_root("changing the machine's addresses (a veth link)")
    stack = await stacks()
    release = asyncio.Event()
    sockets_busy = asyncio.Event()
    held: list[str] = []

    def hold_modules(app: Any) -> Any:
        """Until `release`, every module of the page but the guard waits at the server: the
        first six take the browser's six connections to this origin, so the next one waits
        for a connection in the browser, where an address change fails it for certain (a
        request already on a connection may outlive one)."""
        async def served(scope: dict[str, Any], receive: Any, send: Any) -> None:
            path = scope.get("path", "")
            if (scope["type"] == "http" and path.endswith(".js") and path != GUARD
                    and not release.is_set()):
                held.append(path)
                if len(held) >= SOCKETS_PER_ORIGIN:
                    sockets_busy.set()
                await release.wait()
            await app(scope, receive, send)
        return served

    await stack.stop_server()
    stack.wrap = hold_modules
    await stack.start_server()
    page, log = await browser.new_page()
    loading = asyncio.create_task(page.goto(stack.base_url + "/"))
    failed = ".js -> failed: net::ERR_NETWORK_CHANGED"

    def documents() -> list[str]:
        return [r for r in log.requests if r.endswith(f"GET {stack.base_url}/ -> sent")]

    try:
        await asyncio.wait_for(sockets_busy.wait(), 15)
        with address_change():
            await eventually(lambda: any(failed in r for r in log.requests), 15,
                             what="a module request failed by the address change")
        # Module scripts run in document order: the failed one's error (and so the guard)
        # comes once the ones before it have loaded.
        release.set()
        await eventually(lambda: len(documents()) == 2, 15, what="the guard's reload")
        await expect_login_form(page)
        await page.wait_for_load_state("load")
    finally:
        release.set()
        with contextlib.suppress(Exception):
            await loading
    assert len(documents()) == 2, "\n".join(log.requests)  # reloaded once, by the guard
    await expect(page.get_by_test_id("load-failed")).to_have_count(0)  # gone with the reload
    assert await page.evaluate("sessionStorage.getItem('outlive.loadRetries')") is None
