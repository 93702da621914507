"""Browser tests: Playwright (Python, async API) driving Debian's Chromium against a real
uvicorn server and an in-process worker, all in the test's event loop.

The browser is Debian's `chromium-headless-shell` (or `chromium`), never Playwright's own
download: `scripts/install_browser.sh` installs it. Without the browser or the `playwright`
package the browser test modules are skipped, except under CI=true, where they fail with a
clear message. `OUTLIVE_BROWSER=/path/to/chrome` overrides the search.

Fixtures:
* `stacks` - makes `Stack`s: a store (SQLite file by default, or a PostgreSQL DSN), a worker
  and an API server on 127.0.0.1 with the page mounted; servers can be stopped and started
  again on the same port (same database), as a restart would.
* `browser` - pages for one test, in a Chromium shared by the whole run (launching one takes
  a second); `new_page()` opens a page in a fresh context (its own cookies) that records
  uncaught errors, dialogs and CSP violations, which are checked when the test ends.

The browser tests run in one session-wide event loop (`pytestmark` in each module) so that
they can share that Chromium; every async fixture here runs in that loop too.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
import pytest_asyncio
import uvicorn
from fastapi import FastAPI

from outlive import web
from outlive.api import create_app, hash_key, new_key
from outlive.providers import default_registry
from outlive.runtime import AgentRegistry, Catalog, RuntimeSettings, Worker, demo_agent
from outlive.store import PostgresStore, SqliteStore, Store

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
ROOT = Path(__file__).resolve().parents[2]
SCREENSHOTS = ROOT / "docs" / "screenshots"
"""Where the README's pictures live; the browser tests refresh them only when asked
(OUTLIVE_UPDATE_SCREENSHOTS=1), so `make test` leaves the working tree as it found it."""
TERMINAL = {"succeeded", "failed", "cancelled"}

# Quick leases and scans, as the runtime tests use, so recoveries take a second, not ten.
WORKER_SETTINGS = dict(lease_ttl=3.0, heartbeat_interval=0.5, backstop_interval=0.5,
                       abandon_check_interval=0.2, retry_base=0.01, grace=0.2)


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
    if find_browser() is None:
        _fail(_NO_BROWSER)


@pytest.fixture(scope="session")
def browser_executable() -> str:
    path = find_browser()
    if path is None:
        _fail(_NO_BROWSER)
    assert path is not None
    return path


# ---- the server side ----------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@dataclass
class Stack:
    """A database, a worker and an API server (restartable on the same port)."""

    store: Store
    open_store: Callable[[], Awaitable[Store]]
    """Opens another Store on the same database: each worker gets its own, as a worker
    process would, so that a crashed one takes only its own connections down."""
    speed: float
    worker_settings: dict[str, Any] = field(default_factory=dict)
    worker_store: Store | None = None
    port: int = field(default_factory=free_port)
    app: FastAPI | None = None
    server: uvicorn.Server | None = None
    server_task: asyncio.Task[None] | None = None
    worker: Worker | None = None
    worker_task: asyncio.Task[None] | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def build_app(self) -> FastAPI:
        app = create_app(
            self.store,
            catalog=Catalog(AgentRegistry([demo_agent(self.speed)]),
                            default_registry(demo_speed=self.speed)),
        )
        return app  # create_app mounts the page (outlive.web.mount) and serves /v1/meta

    async def start_server(self) -> None:
        self.app = self.build_app()
        config = uvicorn.Config(self.app, host="127.0.0.1", port=self.port, log_level="warning",
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
        self.worker = Worker(
            self.worker_store,
            AgentRegistry([demo_agent(self.speed)]),
            default_registry(demo_speed=self.speed),
            RuntimeSettings(**{**WORKER_SETTINGS, **self.worker_settings}),
        )
        self.worker_task = asyncio.create_task(self.worker.run())
        await asyncio.wait_for(self.worker.started.wait(), 10)

    async def stop_worker(self) -> None:
        if self.worker is not None and self.worker_task is not None:
            self.worker.request_stop()
            await asyncio.wait_for(self.worker_task, 30)
        self.worker = self.worker_task = None
        await self._close_worker_store()

    async def _close_worker_store(self) -> None:
        if self.worker_store is not None:
            with contextlib.suppress(Exception):
                await self.worker_store.close()
        self.worker_store = None

    async def crash_worker(self) -> None:
        """Like kill -9 for the in-process worker: its tasks vanish, nothing more is written,
        its lease runs out and another worker resumes the session."""
        worker, task = self.worker, self.worker_task
        if worker is None or task is None:
            return
        for run in list(worker.runs.values()):
            run.lost()
        task.cancel()
        with contextlib.suppress(BaseException):
            await task
        self.worker = self.worker_task = None
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


@pytest_asyncio.fixture(loop_scope="session")
async def stacks(tmp_path: Path) -> AsyncIterator[StackFactory]:
    made: list[tuple[Stack, Store]] = []

    async def make(speed: float = 10.0, db: str | None = None, **worker_settings: Any) -> Stack:
        path = tmp_path / f"web{len(made)}.db"

        async def open_store() -> Store:
            store: Store
            if db is None:
                store = await SqliteStore(path).open()
            else:
                store = await PostgresStore(db, max_size=4).open()
            return store

        store = await open_store()
        await store.migrate()
        stack = Stack(store=store, open_store=open_store, speed=speed,
                      worker_settings=worker_settings)
        made.append((stack, store))
        await stack.start_worker()
        await stack.start_server()
        return stack

    yield make
    for stack, store in made:
        with contextlib.suppress(Exception):
            await stack.close()
        await store.close()


# ---- the browser side ---------------------------------------------------------------------


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


@pytest_asyncio.fixture(loop_scope="session", scope="session")
async def chromium(browser_executable: str) -> AsyncIterator[Any]:
    from playwright.async_api import async_playwright

    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=browser_executable,
                                           args=BROWSER_ARGS)
        try:
            yield browser
        finally:
            await browser.close()


@pytest_asyncio.fixture(loop_scope="session")
async def browser(chromium: Any) -> AsyncIterator[Browser]:
    b = Browser(chromium)
    try:
        yield b
        await b.check_pages()
    finally:
        await b.close()


@pytest_asyncio.fixture(loop_scope="session")
async def static_origin() -> AsyncIterator[str]:
    """An origin that serves only the page's files, for testing its modules in isolation."""
    app = FastAPI()
    web.mount(app)
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
