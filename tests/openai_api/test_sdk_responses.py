"""The official `openai` SDK against a real server: the three create modes, retrieve, cancel
(running and finished, twice), follow-ups with `previous_response_id`, questions, `store`,
delete, and errors in OpenAI's shape."""

from __future__ import annotations

from typing import Any

import httpx
import openai
import pytest

from outlive.providers._demo_script import QUESTION

from .harness import Server, session_of, wait_until


def settled(client: openai.OpenAI, response_id: str) -> Any:
    wait_until(lambda: client.responses.retrieve(response_id).status
               not in ("queued", "in_progress"), what="the response settled")
    return client.responses.retrieve(response_id)


def test_background_returns_at_once_and_foreground_waits(server: Server) -> None:
    client = server.client()
    queued = client.responses.create(model="demo", input="hello", background=True,
                                     metadata={"ticket": "42"})
    assert queued.status in ("queued", "in_progress") and queued.object == "response"
    assert queued.id.startswith("resp_") and queued.model == "demo"
    done = settled(client, queued.id)
    assert done.status == "completed" and "hello" in done.output_text
    assert done.metadata == {"ticket": "42"}
    assert done.usage is not None and done.usage.total_tokens > 0
    assert [i.type for i in done.output] == ["message", "mcp_call", "message"]
    call = done.output[1]
    assert call.server_label == "outlive" and call.name == "lookup" and call.output

    waited = client.responses.create(model="demo:scripted", input="hello again")
    assert waited.status == "completed" and "hello again" in waited.output_text
    assert client.responses.retrieve(waited.id).to_dict() == waited.to_dict()
    # An EventSource that reconnects sends Last-Event-ID: the same as starting_after.
    by_header = client.responses.retrieve(waited.id, stream=True,
                                          extra_headers={"Last-Event-ID": "3"})
    by_query = client.responses.retrieve(waited.id, stream=True, starting_after=3)
    assert [e.to_dict() for e in by_header] == [e.to_dict() for e in by_query]
    with client.responses.retrieve(waited.id, stream=True, starting_after=3) as tail:
        assert next(iter(tail)).sequence_number == 4


def test_cancel_a_running_response_then_again_then_a_finished_one(server: Server) -> None:
    client = server.client()
    running = client.responses.create(model="demo", input="run long", background=True)
    wait_until(lambda: client.responses.retrieve(running.id).output_text != "",
               what="some text")
    cancelled = client.responses.cancel(running.id)
    assert cancelled.status == "cancelled"
    assert cancelled.output[0].status == "incomplete" and cancelled.output_text
    again = client.responses.cancel(running.id)
    assert again.to_dict() == cancelled.to_dict(), "idempotent"
    events = list(client.responses.retrieve(running.id, stream=True))
    assert events[-1].type == "response.cancelled"  # not in the SDK's types: a plain dict
    assert events[-1].response == cancelled.to_dict()

    finished = client.responses.create(model="demo", input="hello")
    assert client.responses.cancel(finished.id).to_dict() == finished.to_dict()


def test_a_queued_response_is_cancelled_before_it_runs(db_url: str) -> None:
    srv = Server(db_url, 20.0).start()  # no worker: it stays queued
    try:
        client = srv.client()
        queued = client.responses.create(model="demo", input="hello", background=True)
        assert queued.status == "queued"
        cancelled = client.responses.cancel(queued.id)
        assert cancelled.status == "cancelled" and cancelled.output == []
        assert [e.type for e in client.responses.retrieve(queued.id, stream=True)] == [
            "response.created", "response.queued", "response.cancelled"]
    finally:
        srv.stop()


def test_previous_response_id_continues_the_same_session(server: Server) -> None:
    client = server.client()
    first = client.responses.create(model="demo", input="hello")
    second = client.responses.create(model="demo", input="think about it",
                                     previous_response_id=first.id)
    assert second.status == "completed" and "think about it" in second.output_text
    assert session_of(second.id) == session_of(first.id)
    assert second.previous_response_id == first.id and first.previous_response_id is None
    assert any(i.type == "reasoning" for i in second.output)
    assert client.responses.retrieve(first.id).to_dict() == first.to_dict(), "unchanged"
    texts = [e.data["text"] for e in server.events(session_of(first.id))
             if e.type == "user_message"]
    assert texts == ["hello", "think about it"]

    with pytest.raises(openai.BadRequestError) as branch:
        client.responses.create(model="demo", input="again", previous_response_id=first.id)
    assert branch.value.code == "previous_response_not_latest"
    with pytest.raises(openai.BadRequestError) as other_model:
        client.responses.create(model="demo:other", input="x", previous_response_id=second.id)
    assert other_model.value.param in ("model",)

    running = client.responses.create(model="demo", input="run long", background=True,
                                      previous_response_id=second.id)
    with pytest.raises(openai.BadRequestError) as busy:
        client.responses.create(model="demo", input="more", previous_response_id=running.id)
    assert busy.value.code == "previous_response_in_progress"
    assert busy.value.param == "previous_response_id"
    client.responses.cancel(running.id)


def test_a_question_completes_the_response_and_the_answer_follows_up(server: Server) -> None:
    client = server.client()
    asked = client.responses.create(model="demo", input="ask me")
    assert asked.status == "completed" and QUESTION in asked.output_text
    answered = client.responses.create(model="demo", input="A short summary",
                                       previous_response_id=asked.id)
    assert answered.status == "completed" and answered.output_text


def test_input_items_and_instructions_become_one_user_message(server: Server) -> None:
    client = server.client()
    response = client.responses.create(
        model="demo", instructions="Be brief.",
        input=[{"role": "developer", "content": "Answer in English."},
               {"role": "user", "content": [{"type": "input_text", "text": "hello"}]}],
    )
    assert response.status == "completed"
    texts = [e.data["text"] for e in server.events(session_of(response.id))
             if e.type == "user_message"]
    assert texts == ["Be brief.\n\nAnswer in English.\n\nhello"]


def test_store_false_forgets_and_delete_removes(server: Server) -> None:
    client = server.client()
    forgotten = client.responses.create(model="demo", input="hello", store=False)
    assert forgotten.status == "completed" and forgotten.output_text
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(forgotten.id)
    kept = client.responses.create(model="demo", input="hello", background=True)
    client.responses.delete(kept.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(kept.id)
    with pytest.raises(openai.BadRequestError) as refused:
        client.responses.create(model="demo", input="x", store=False, background=True)
    assert refused.value.param == "store"


@pytest.mark.parametrize("db_backend", ["sqlite"])
def test_errors_come_in_openais_shape(server: Server) -> None:
    client = server.client()
    with pytest.raises(openai.AuthenticationError) as auth:
        server.client(api_key="olk_wrong").responses.retrieve("resp_x")
    assert auth.value.code == "invalid_api_key"
    with pytest.raises(openai.NotFoundError) as missing:
        client.responses.retrieve("resp_01ARZ3NDEKTSV4RRFFQ69G5FAV_1")
    assert missing.value.body == {
        "message": "Response with id 'resp_01ARZ3NDEKTSV4RRFFQ69G5FAV_1' not found.",
        "type": "invalid_request_error", "param": None, "code": None}
    refusals: list[tuple[dict[str, Any], str]] = [
        ({"model": "no-such-model", "input": "x"}, "model"),
        ({"model": "demo", "input": "x", "tools": [{"type": "web_search"}]}, "tools[0].type"),
        ({"model": "demo", "input": "x", "tools": [{"type": "function", "name": "f g"}]},
         "tools"),
        ({"model": "demo", "input": [{"role": "assistant", "content": "x"}]}, "input[0]"),
        ({"model": "demo", "input": [{"type": "mcp_approval_response",
                                      "approval_request_id": "a", "approve": True}]},
         "previous_response_id"),
        ({"model": "demo", "input": "   "}, "input"),
        ({"model": "demo", "input": "x", "previous_response_id": "resp_nope"},
         "previous_response_id"),
    ]
    for body, param in refusals:
        with pytest.raises((openai.BadRequestError, openai.NotFoundError)) as refused:
            client.responses.create(**body)
        assert refused.value.param == param, body
        assert refused.value.body["type"] == "invalid_request_error"  # type: ignore[index]
    with pytest.raises(openai.BadRequestError) as negative:
        client.responses.retrieve("resp_x", stream=True, starting_after=-1)
    assert negative.value.param == "starting_after"
    raw = httpx.get(f"{server.base_url}/nowhere", headers={"Authorization": f"Bearer {server.key}"})
    assert raw.status_code == 404 and set(raw.json()["error"]) == {"message", "type", "param",
                                                                   "code"}
    big = httpx.post(f"{server.base_url}/responses", content=b"x" * 2_000_000,
                     headers={"Authorization": f"Bearer {server.key}",
                              "Content-Type": "application/json"})
    assert big.status_code == 413 and big.json()["error"]["code"] == "request_too_large"
    assert [m.id for m in client.models.list()] == ["demo"]
