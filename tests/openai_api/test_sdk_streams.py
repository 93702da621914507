"""The official `openai` SDK against a real server: background streams dropped and resumed
with `starting_after` at random points (SQLite and PostgreSQL), foreground streams cancelled
by a disconnect, and a worker `kill -9` mid-answer that still ends in one clean answer."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import openai
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from outlive.providers._demo_script import LONG_PARAGRAPHS

from .harness import Server, WorkerProcesses, session_of, wait_until

TERMINAL = {"response.completed", "response.failed", "response.incomplete", "response.cancelled"}


def dump(events: list[Any]) -> list[dict[str, Any]]:
    return [e.to_dict() for e in events]


def full_replay(client: openai.OpenAI, response_id: str) -> list[Any]:
    return list(client.responses.retrieve(response_id, stream=True))


def read_some(stream: Any, k: int | None) -> list[Any]:
    """Up to `k` events (all when None), then the connection is closed: dropped, as far as
    the server knows. Closing the iterator and the stream here, not when they are collected,
    keeps the dropped connection's cleanup out of the next request's way."""
    it = iter(stream)
    out: list[Any] = []
    try:
        while k is None or len(out) < k:
            ev = next(it, None)
            if ev is None:
                break
            out.append(ev)
    finally:
        it.close()
        stream.close()
    return out


@settings(max_examples=6, deadline=None, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(drops=st.lists(st.integers(1, 30), min_size=1, max_size=4))
def test_a_background_stream_resumes_exactly_after_random_drops(
    server: Server, drops: list[int]
) -> None:
    with server.client() as client:
        got = read_some(client.responses.create(model="demo", input="think, then look it up",
                                                background=True, stream=True), drops[0])
    response_id = got[0].response.id
    for k in [*drops[1:], None]:  # each reconnect is a new client, as after a restart
        if got[-1].type in TERMINAL:
            break
        with server.client() as client:
            got += read_some(client.responses.retrieve(
                response_id, stream=True, starting_after=got[-1].sequence_number), k)
    assert [e.sequence_number for e in got] == list(range(len(got))), "gapless, no repeats"
    assert got[-1].type == "response.completed"
    client = server.client()
    assert dump(got) == dump(full_replay(client, response_id)), "live equals any replay"
    final = client.responses.retrieve(response_id)
    assert final.status == "completed" and final.output_text
    assert final.to_dict() == got[-1].response.to_dict()
    tail = list(client.responses.retrieve(response_id, stream=True, starting_after=len(got) - 3))
    assert dump(tail) == dump(got[-2:])


def test_a_foreground_stream_is_cancelled_when_its_client_leaves(server: Server) -> None:
    client = server.client()
    first = read_some(client.responses.create(model="demo", input="run long", stream=True), 6)
    response_id = first[0].response.id
    assert first[-1].type == "response.output_text.delta"
    wait_until(lambda: client.responses.retrieve(response_id).status == "cancelled",
               what="the run cancelled by the disconnect")
    final = client.responses.retrieve(response_id)
    # Whatever was in flight when the cancel landed (the first answer or, on a slow machine,
    # the slow task after it) is kept and marked incomplete; the answer never got to its end.
    assert final.output[-1].status == "incomplete", [(o.type, o.status) for o in final.output]
    assert final.output_text and LONG_PARAGRAPHS[-1] not in final.output_text, "partial text kept"
    assert full_replay(client, response_id)[-1].type == "response.cancelled"


def test_a_background_stream_disconnect_does_not_cancel(server: Server) -> None:
    client = server.client()
    (first,) = read_some(client.responses.create(model="demo", input="hello", background=True,
                                                 stream=True), 1)
    wait_until(lambda: client.responses.retrieve(first.response.id).status != "queued"
               and client.responses.retrieve(first.response.id).status != "in_progress",
               what="the run settled")
    assert client.responses.retrieve(first.response.id).status == "completed"


@pytest.mark.parametrize("db_backend", ["postgres"])
@pytest.mark.parametrize("speed", [12.0])
def test_a_worker_killed_mid_answer_still_completes_it_once(
    db_url: str, speed: float, tmp_path: Path
) -> None:
    srv = Server(db_url, speed).start()
    procs = WorkerProcesses(db_url, tmp_path)
    try:
        victim = procs.start(speed, lease_ttl=1.5)
        client = srv.client()
        stream = client.responses.create(model="demo", input="run long", background=True,
                                         stream=True)
        got: list[Any] = []
        killed_at = -1
        text = ""
        with stream:
            for ev in stream:
                got.append(ev)
                text += ev.delta if ev.type == "response.output_text.delta" else ""
                if killed_at < 0 and LONG_PARAGRAPHS[0][:40] in text:
                    procs.kill9(victim)  # mid-answer: the long text is still streaming
                    killed_at = len(got)
                    srv.start_worker()  # picks the session up once the dead lease lapses
        assert killed_at > 0, "the kill happened while text streamed"
        assert [e.sequence_number for e in got] == list(range(len(got)))
        assert got[-1].type == "response.completed"
        final = got[-1].response
        for paragraph in LONG_PARAGRAPHS:
            assert final.output_text.count(paragraph) == 1, paragraph[:40]
        abandoned = [i for i in final.output if i.type == "message" and i.status == "incomplete"]
        assert abandoned and all(i.content == [] for i in abandoned)
        # A client that keeps the text of items that completed reads the answer once.
        done = {e.item.id: e.item.status for e in got if e.type == "response.output_item.done"}
        kept = "".join(e.delta for e in got if e.type == "response.output_text.delta"
                       and done[e.item_id] == "completed")
        assert kept == final.output_text
        events = srv.events(session_of(final.id))
        assert any(e.type == "session_resumed" for e in events)
        resumed = list(client.responses.retrieve(final.id, stream=True,
                                                 starting_after=killed_at - 1))
        assert dump(resumed) == dump(got[killed_at:])
    finally:
        procs.close()
        srv.stop()
