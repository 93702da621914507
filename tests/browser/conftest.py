"""Browser fixtures: Playwright (Python, async API) driving Debian's Chromium against a real
uvicorn server and an in-process worker, all in the test's event loop (the pieces are in
tests/support/browser.py).

Without the browser or the `playwright` package the browser tests fail with a message that
says how to install them (`make test` does): a skipped browser test would pass a run that
never opened the workbench.

Fixtures:
* `stacks` - makes `Stack`s: a store (SQLite file by default, or a PostgreSQL DSN; with
  `secrets=True`, the tests' server key, which browser tokens need), a worker
  and an API server on 127.0.0.1 with the page mounted; servers can be stopped and started
  again on the same port (same database), as a restart would.
* `browser` - pages for one test, in a Chromium shared by the whole run (launching one takes
  a second); `new_page()` opens a page in a fresh context (its own cookies) that records
  uncaught errors, dialogs and CSP violations, which are checked when the test ends.

The browser tests run in one session-wide event loop (`pytestmark = LOOP` in each module) so
that they can share that Chromium; every async fixture here runs in that loop too.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from fastapi import FastAPI

from outlive import web
from outlive.api import ApiSettings
from outlive.store import PostgresStore, SqliteStore, Store
from tests.support.browser import (
    BROWSER_ARGS,
    Browser,
    Stack,
    StackFactory,
    browser_path,
    checked,
    serving,
)
from tests.support.secrets import shared_box


@pytest.fixture(scope="session")
def browser_executable() -> str:
    return browser_path()


@pytest_asyncio.fixture(loop_scope="session")
async def stacks(tmp_path: Path) -> AsyncIterator[StackFactory]:
    made: list[tuple[Stack, Store]] = []

    async def make(speed: float = 10.0, db: str | None = None,
                   api_settings: ApiSettings | None = None, secrets: bool = False,
                   **worker_settings: Any) -> Stack:
        path = tmp_path / f"web{len(made)}.db"
        box = shared_box() if secrets else None

        async def open_store() -> Store:
            store: Store
            if db is None:
                store = await SqliteStore(path, secrets=box).open()
            else:
                store = await PostgresStore(db, max_size=4, secrets=box).open()
            return store

        store = await open_store()
        await store.migrate()
        stack = Stack(store=store, open_store=open_store, speed=speed,
                      worker_settings=worker_settings, api_settings=api_settings)
        made.append((stack, store))
        await stack.start_worker()
        await stack.start_server()
        return stack

    yield make
    for stack, store in made:
        with contextlib.suppress(Exception):
            await stack.close()
        await store.close()


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
    async with checked(chromium) as b:
        yield b


@pytest_asyncio.fixture(loop_scope="session")
async def static_origin() -> AsyncIterator[str]:
    """An origin that serves only the page's files, for testing its modules in isolation."""
    app = FastAPI()
    web.mount(app)
    async with serving(app) as origin:
        yield origin
