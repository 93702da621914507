"""The OpenAI SDK's function-calling loop across a `kill -9` of the whole server (docs/
client-tools.md): `outlive serve` processes on PostgreSQL; the response ends with a
`function_call`, the server (API and worker in one process) is killed with -9 while the
session waits on its client, and a new server takes the `function_call_output` and finishes
the answer, once. While nothing runs the session holds no lease."""

from __future__ import annotations

import asyncio
import json
import signal
import time
from pathlib import Path
from typing import Any

import openai
import pytest

from outlive.domain import Status
from outlive.store import PostgresStore
from tests.runtime.test_processes import owner_id, pg_store, procs
from tests.support.inprocess import make_key
from tests.support.processes import Processes, ServeProcess
from tests.support.sessions import all_events, settled

__all__ = ["owner_id", "pg_store", "procs"]  # fixtures shared with test_processes

pytestmark = pytest.mark.slow

WEATHER = {"type": "function", "name": "get_weather", "description": "The weather in a city.",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                          "required": ["city"]}}


def _client(url: str, key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=url + "/openai/v1", api_key=key, max_retries=0, timeout=30)


async def test_the_sdk_loop_survives_a_kill9_of_the_server_between_call_and_result(
    pg_store: PostgresStore, procs: Processes, tmp_path: Path
) -> None:
    store = pg_store
    key, _ = await make_key(store)

    def serve() -> ServeProcess:
        return ServeProcess(tmp_path, f"serve-{time.monotonic_ns()}", "--demo-speed", "0",
                            "--lease-ttl", "2", db=procs.dsn)

    first = serve()
    second: ServeProcess | None = None
    try:
        await first.ready()

        def ask() -> Any:
            with _client(first.url, key) as client:
                return client.responses.create(model="demo", tools=[WEATHER],
                                               input='call get_weather {"city": "Oslo"}')

        asked = await asyncio.to_thread(ask)
        assert asked.status == "completed"
        call = asked.output[-1]
        assert call.type == "function_call" and json.loads(call.arguments) == {"city": "Oslo"}
        sid = "ses_" + asked.id.split("_")[1]

        first.kill9()
        assert await first.exited(5) == -signal.SIGKILL
        waiting = await store.load_session(sid)
        assert (waiting.status, waiting.attention) == (Status.RUNNING, "tool")
        assert (waiting.lease_worker, waiting.lease_expires_at) == (None, None)

        second = serve()
        await second.ready()
        url = second.url

        def answer() -> Any:
            with _client(url, key) as client:
                return client.responses.create(
                    model="demo", previous_response_id=asked.id, tools=[WEATHER],
                    input=[{"type": "function_call_output", "call_id": call.call_id,
                            "output": json.dumps({"temp_c": 21})}])

        done = await asyncio.to_thread(answer)
        assert done.status == "completed" and done.previous_response_id == asked.id
        assert "temp_c" in done.output_text
        assert (await settled(store, sid)).status is Status.SUCCEEDED
        events = await all_events(store, sid)
        types = [e.type for e in events]
        assert types.count("client_tool_call") == types.count("client_tool_result") == 1
        ends = [e for e in events if e.type == "tool_end"]
        assert len(ends) == 1 and ends[0].data["result"] == '{"temp_c": 21}'
        results = [e for e in await store.read_entries(sid) if e.kind == "tool_result"]
        assert len(results) == 1
    finally:
        for p in (first, second):
            if p is not None:
                p.reap()
