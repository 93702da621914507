"""Schemathesis against the served OpenAPI document: generated requests, valid and not, to a
real uvicorn on 127.0.0.1 find no 5xx and no response outside the document.

The two SSE endpoints stream until the client leaves, so the owner stream is left out and the
session events endpoint is asked for its JSON pages (`Accept: application/json`).
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import schemathesis
import schemathesis.specs.openapi.checks as checks
import uvicorn
from hypothesis import HealthCheck, given, settings

from outlive.api import ApiSettings, create_app, hash_key, new_key
from outlive.providers import default_registry
from outlive.runtime import AgentRegistry, Catalog, demo_agent
from outlive.store import SqliteStore
from tests.support.secrets import shared_box

# No 5xx, and every status, content type, header and body inside the document. Not
# `positive_data_acceptance`: a schema-valid body can still name an agent that does not exist,
# and a clear 400 is the right answer to that.
CHECKS = [
    schemathesis.checks.not_a_server_error,
    checks.status_code_conformance,
    checks.content_type_conformance,
    checks.response_headers_conformance,
    checks.response_schema_conformance,
    checks.negative_data_rejection,
]

CHECKS_SETTINGS = settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=list(HealthCheck),
    derandomize=True,
)


class _Server:
    def __init__(self, db: Path) -> None:
        self.db = db
        self.key = new_key()
        self.session_id = ""
        self.port = 0
        self._ready = threading.Event()
        self._server: uvicorn.Server | None = None
        self._thread = threading.Thread(target=lambda: asyncio.run(self._main()), daemon=True)

    async def _main(self) -> None:
        store = await SqliteStore(self.db, secrets=shared_box()).open()  # as `serve` has
        await store.migrate()
        owner = await store.ensure_owner("fuzz")
        await store.create_api_key(owner.id, hash_key(self.key), None)
        session = await store.create_session(owner.id, agent="demo", model="demo:scripted",
                                             prompt="hello")
        self.session_id = session.id
        app = create_app(store,
                         catalog=Catalog(AgentRegistry([demo_agent(0)]),
                                         default_registry(demo_speed=0)),
                         settings=ApiSettings(ping_interval=1.0))
        self._server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0,
                                                     log_level="error"))
        serving = asyncio.create_task(self._server.serve())
        while not self._server.started and not serving.done():  # noqa: ASYNC110
            await asyncio.sleep(0.02)
        self.port = self._server.servers[0].sockets[0].getsockname()[1]
        self._ready.set()
        await serving
        await store.close()

    def __enter__(self) -> _Server:
        self._thread.start()
        assert self._ready.wait(30), "server did not start"
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.should_exit = True
        self._thread.join(15)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[_Server]:
    with _Server(tmp_path_factory.mktemp("fuzz") / "fuzz.db") as s:
        yield s


def _operations(server: _Server) -> list[object]:
    schema = schemathesis.openapi.from_url(f"http://127.0.0.1:{server.port}/openapi.json")
    schema = schema.exclude(path="/v1/events")
    return [op.ok() for op in schema.get_all_operations()]


def test_generated_requests_find_no_5xx_and_stay_inside_the_document(server: _Server) -> None:
    headers = {"Authorization": f"Bearer {server.key}", "Accept": "application/json"}
    failures: list[str] = []
    ran = 0
    for op in _operations(server):

        @CHECKS_SETTINGS
        @given(case=op.as_strategy())  # type: ignore[attr-defined]
        def run(case: object) -> None:
            if "{session_id}" in case.path and case.path_parameters:  # type: ignore[attr-defined]
                # Half the time aim at a real session, so deeper code paths run too.
                if hash(str(case.path_parameters)) % 2:  # type: ignore[attr-defined]
                    case.path_parameters["session_id"] = server.session_id  # type: ignore[attr-defined]
            case.call_and_validate(headers=headers, timeout=10,  # type: ignore[attr-defined]
                                   checks=CHECKS)

        try:
            run()
            ran += 1
        except Exception as exc:  # collect every operation's failure, then report them all
            failures.append(f"{op.label}: {exc}")  # type: ignore[attr-defined]
        time.sleep(0)
    assert ran >= 10, "schemathesis found too few operations"
    assert not failures, "\n\n".join(failures)
