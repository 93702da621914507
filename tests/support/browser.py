"""The browser tests' side of things: finding Debian's Chromium, a `Stack` (a database, an
in-process worker and an API server with the page, restartable on the same port) and
`Browser`, pages that record what went wrong in them.

The browser is Debian's `chromium-headless-shell` (or `chromium`), never Playwright's own
download: `scripts/install_browser.sh` installs it. `OUTLIVE_BROWSER=/path/to/chrome`
overrides the search. Nothing here imports playwright: a test module that needs it calls
`require_browser()` first.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
import uvicorn
from fastapi import FastAPI

from outlive.api import ApiSettings, hash_key, new_key
from outlive.store import Store

from .inprocess import QUICK, RunningWorker, demo_app, start_worker
from .processes import REPO, free_port

BROWSER_CANDIDATES = (
    "/usr/bin/chromium-headless-shell",
    "/usr/lib/chromium/headless_shell",
    "/usr/lib/chromium/chromium-headless-shell",
    "/usr/bin/chromium",
)
BROWSER_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
SCREENSHOTS = REPO / "docs" / "screenshots"
"""Where the README's pictures live; the browser tests refresh them only when asked
(OUTLIVE_UPDATE_SCREENSHOTS=1), so `make test` leaves the working tree as it found it."""
TERMINAL = {"succeeded", "failed", "cancelled"}


def find_browser() -> str | None:
    override = os.environ.get("OUTLIVE_BROWSER")
    if override:
        return override if os.access(override, os.X_OK) else None
    for candidate in BROWSER_CANDIDATES:
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    return None


_NO_PLAYWRIGHT = ("the browser tests need the 'playwright' package (pip install playwright; "
                  "`playwright install` is not needed: Debian's Chromium is used)")
_NO_BROWSER = ("no Chromium for the browser tests: run scripts/install_browser.sh as root "
               "(apt-get install chromium-headless-shell), or set OUTLIVE_BROWSER; looked for "
               + ", ".join(BROWSER_CANDIDATES))


def _fail(message: str) -> None:
    pytest.fail(f"{message} (`make test` installs both)", pytrace=False)


def require_browser() -> None:
    """Call at the top of a browser test module, before it imports playwright. Without
    Chromium or the playwright package the tests fail rather than skip: a skipped browser test
    would pass a run that never opened the workbench."""
    try:
        import playwright.async_api  # noqa: F401
    except ImportError:
        _fail(_NO_PLAYWRIGHT)
    browser_path()


def browser_path() -> str:
    """The Chromium to drive; fails the test when there is none."""
    path = find_browser()
    if path is None:
        _fail(_NO_BROWSER)
    assert path is not None
    return path


# ---- the server side ---------------------------------------------------------------------


@dataclass
class Stack:
    """A database, a worker and an API server (restartable on the same port)."""

    store: Store
    open_store: Callable[[], Awaitable[Store]]
    """Opens another Store on the same database: each worker gets its own, as a worker
    process would, so that a crashed one takes only its own connections down."""
    speed: float
    worker_settings: dict[str, Any] = field(default_factory=dict)
    api_settings: ApiSettings | None = None
    worker_store: Store | None = None
    port: int = field(default_factory=free_port)
    app: FastAPI | None = None
    server: uvicorn.Server | None = None
    server_task: asyncio.Task[None] | None = None
    worker: RunningWorker | None = None
    wrap: Callable[[Any], Any] | None = None
    """Put around the app when the server starts (a test's server-side hold on a route)."""

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def start_server(self) -> None:
        self.app = demo_app(self.store, self.speed, self.api_settings)  # the page, /v1/meta
        served = self.app if self.wrap is None else self.wrap(self.app)
        config = uvicorn.Config(served, host="127.0.0.1", port=self.port, log_level="warning",
                                lifespan="on", timeout_graceful_shutdown=2)
        self.server = uvicorn.Server(config)
        self.server_task = asyncio.create_task(self.server.serve())
        deadline = asyncio.get_running_loop().time() + 10
        while not self.server.started:
            if self.server_task.done():
                self.server_task.result()
                raise RuntimeError("uvicorn exited before it started")
            if asyncio.get_running_loop().time() > deadline:
                raise RuntimeError("uvicorn did not start in time")
            await asyncio.sleep(0.02)

    async def stop_server(self) -> None:
        """Stop accepting, end the open streams, and wait for the server to be gone."""
        server, task, app = self.server, self.server_task, self.app
        if server is None or task is None or app is None:
            return
        server.should_exit = True
        # Once the listener is closed nobody can reconnect; then end the streams still open
        # (uvicorn waits for open responses before it finishes shutting down).
        for _ in range(100):
            if server.servers and not any(s.is_serving() for s in server.servers):
                break
            await asyncio.sleep(0.02)
        app.state.ctx.hub.close_streams()
        try:
            await asyncio.wait_for(asyncio.shield(task), 10)
        except TimeoutError:
            server.force_exit = True
            await asyncio.wait_for(task, 10)
        self.server = self.server_task = self.app = None

    async def start_worker(self) -> None:
        self.worker_store = await self.open_store()
        self.worker = await start_worker(self.worker_store, self.speed,
                                         **{**QUICK, **self.worker_settings})

    async def stop_worker(self) -> None:
        if self.worker is not None:
            await self.worker.stop(30)
        self.worker = None
        await self._close_worker_store()

    async def _close_worker_store(self) -> None:
        if self.worker_store is not None:
            with contextlib.suppress(Exception):
                await self.worker_store.close()
        self.worker_store = None

    async def crash_worker(self) -> None:
        """Like kill -9 for the in-process worker: its tasks vanish, nothing more is written,
        its lease runs out and another worker resumes the session."""
        if self.worker is None:
            return
        await self.worker.crash()
        self.worker = None
        # A dead process's connections close (and roll back) with it.
        await self._close_worker_store()

    async def close(self) -> None:
        await self.stop_server()
        await self.stop_worker()

    async def new_key(self, owner: str) -> str:
        key = new_key()
        o = await self.store.ensure_owner(owner)
        await self.store.create_api_key(o.id, hash_key(key), "browser tests")
        return key

    def client(self, key: str) -> httpx.AsyncClient:
        return httpx.AsyncClient(base_url=self.base_url,
                                 headers={"Authorization": f"Bearer {key}"}, timeout=10)

    async def snapshot(self, key: str, session_id: str) -> dict[str, Any]:
        async with self.client(key) as c:
            r = await c.get(f"/v1/sessions/{session_id}")
            r.raise_for_status()
            body: dict[str, Any] = r.json()
            return body

    async def wait_settled(self, key: str, session_id: str, timeout: float = 40) -> dict[str, Any]:
        deadline = asyncio.get_running_loop().time() + timeout
        while True:
            body = await self.snapshot(key, session_id)
            if body["session"]["status"] in TERMINAL:
                return body
            if asyncio.get_running_loop().time() > deadline:
                raise AssertionError(f"session {session_id} did not settle: {body['session']}")
            await asyncio.sleep(0.1)


StackFactory = Callable[..., Awaitable[Stack]]


LOOP = pytest.mark.asyncio(loop_scope="session")
"""Put `pytestmark = LOOP` in every browser test module."""


# ---- the browser side --------------------------------------------------------------------


# Recorded in every page before its scripts run (init scripts are not subject to the CSP).
_INIT_SCRIPT = """
window.__csp = [];
document.addEventListener('securitypolicyviolation', (e) => {
  window.__csp.push(e.violatedDirective + ' ' + e.blockedURI);
});
"""


@dataclass
class PageLog:
    errors: list[str] = field(default_factory=list)
    dialogs: list[str] = field(default_factory=list)
    console: list[str] = field(default_factory=list)
    """The page's console errors and warnings."""
    requests: list[str] = field(default_factory=list)
    """Each request the page made, with how it ended (status or failure) and when (seconds
    since the page opened): a page stuck before its first view says what it waited on."""


PAGE_LOGS: weakref.WeakKeyDictionary[Any, PageLog] = weakref.WeakKeyDictionary()
"""Every page's log, by page (for the waits that dump it when a view never came)."""


def _record_requests(page: Any, log: PageLog) -> None:
    opened = time.monotonic()

    def line(request: Any, outcome: str) -> str:
        return (f"{time.monotonic() - opened:7.2f}s {request.method} {request.url} "
                f"-> {outcome}")

    page.on("request", lambda r: log.requests.append(line(r, "sent")))
    page.on("response", lambda r: log.requests.append(line(r.request, f"{r.status}")))
    page.on("requestfinished", lambda r: log.requests.append(line(r, "body read")))
    page.on("requestfailed", lambda r: log.requests.append(line(r, f"failed: {r.failure}")))
    page.on("console", lambda m: log.console.append(f"{m.type}: {m.text}")
            if m.type in ("error", "warning") else None)


class Browser:
    def __init__(self, browser: Any) -> None:
        self.browser = browser
        self.pages: list[tuple[Any, PageLog]] = []
        self.contexts: list[Any] = []

    async def new_page(self, viewport: tuple[int, int] = (1280, 800)) -> tuple[Any, PageLog]:
        context = await self.browser.new_context(
            viewport={"width": viewport[0], "height": viewport[1]}, color_scheme="light"
        )
        self.contexts.append(context)
        page = await context.new_page()
        page.set_default_timeout(15_000)
        log = PageLog()
        page.on("pageerror", lambda exc: log.errors.append(str(exc)))
        _record_requests(page, log)
        PAGE_LOGS[page] = log

        async def on_dialog(dialog: Any) -> None:
            log.dialogs.append(f"{dialog.type}: {dialog.message}")
            await dialog.dismiss()

        page.on("dialog", on_dialog)
        await page.add_init_script(_INIT_SCRIPT)
        self.pages.append((page, log))
        return page, log

    async def check_pages(self) -> None:
        for page, log in self.pages:
            assert not log.errors, f"uncaught errors in the page: {log.errors}"
            assert not log.dialogs, f"the page opened dialogs: {log.dialogs}"
            csp: list[str] = []
            if not page.is_closed():
                with contextlib.suppress(Exception):  # a page mid-navigation has no answer
                    csp = await page.evaluate("window.__csp || []")
            assert not csp, f"CSP violations: {csp}"

    async def close(self) -> None:
        for context in self.contexts:
            with contextlib.suppress(Exception):
                await context.close()


@contextlib.asynccontextmanager
async def checked(chromium: Any) -> AsyncIterator[Browser]:
    """A `Browser` on a launched Chromium for one test: its pages checked for uncaught
    errors, dialogs and CSP violations when the test passed, its contexts closed always."""
    b = Browser(chromium)
    try:
        yield b
        await b.check_pages()
    finally:
        await b.close()


@contextlib.asynccontextmanager
async def serving(app: FastAPI) -> AsyncIterator[str]:
    """`app` on a free loopback port for the block (an origin other than the stack's)."""
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=free_port(),
                                           log_level="warning", lifespan="off"))
    task = asyncio.create_task(server.serve())
    while not server.started:
        if task.done():
            task.result()
        await asyncio.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{server.config.port}"
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, 10)
