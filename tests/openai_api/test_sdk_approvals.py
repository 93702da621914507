"""Tool approvals through the official `openai` SDK against a real server: the response that
asks completes with an `mcp_approval_request`; an `mcp_approval_response` item on the next
request decides it through the store (approve: the call runs; deny: the model is told and goes
on), streamed from sequence_number 0 in a response that opens at the decision; a repeat answers
the same, the other decision is a 409; wrong ids and missing fields are errors in OpenAI's
shape; a message beside the item reaches the carried-on run."""

from __future__ import annotations

import uuid
from typing import Any

import httpx
import openai
import pytest

from outlive.api import hash_key, new_key

from .harness import Server, session_of, wait_until

SEND = "please send it"


def answer(approval_id: str, approve: bool, **extra: Any) -> dict[str, Any]:
    return {"type": "mcp_approval_response", "approval_request_id": approval_id,
            "approve": approve, **extra}


def asks(client: openai.OpenAI) -> Any:
    """A response that ends waiting for approval of `send_message`."""
    asked = client.responses.create(model="demo", input=SEND)
    assert asked.status == "completed"
    request = asked.output[-1]
    assert request.type == "mcp_approval_request" and request.name == "send_message"
    assert request.server_label == "outlive" and '"to":"team"' in request.arguments
    return asked


def decided_seq(server: Server, session_id: str, approval_id: str) -> int:
    (seq,) = [e.seq for e in server.events(session_id) if e.type == "approval_decided"
              and e.data["approval_id"] == approval_id]
    return seq


def native(server: Server, method: str, path: str, key: str | None = None,
           **kw: Any) -> httpx.Response:
    base = server.base_url.removesuffix("/openai/v1")
    return httpx.request(method, base + path, timeout=10, **kw,
                         headers={"Authorization": f"Bearer {key or server.key}"})


def test_approve_runs_the_call_in_a_response_that_opens_at_the_decision(
        server: Server) -> None:
    client = server.client()
    asked = asks(client)
    approval_id = asked.output[-1].id
    assert approval_id.startswith("apv_")
    sid = session_of(asked.id)
    assert native(server, "GET", f"/v1/sessions/{sid}").json()["session"]["attention"] == \
        "approval"

    done = client.responses.create(model="demo", previous_response_id=asked.id,
                                   input=[answer(approval_id, True)])
    assert done.id == f"resp_{sid.removeprefix('ses_')}_{decided_seq(server, sid, approval_id)}"
    assert done.status == "completed" and done.previous_response_id == asked.id
    call = done.output[0]
    assert call.type == "mcp_call" and call.status == "completed"
    assert call.name == "send_message" and call.approval_request_id == approval_id
    assert call.output is not None and '"sent":true' in call.output
    assert done.output_text == "Sent, with your approval."
    assert client.responses.retrieve(asked.id).to_dict() == asked.to_dict(), "unchanged"
    assert client.responses.retrieve(done.id).to_dict() == done.to_dict()

    # The same store path as POST /v1/sessions/{id}/approvals/{approval_id}: decided once.
    (record,) = native(server, "GET", f"/v1/sessions/{sid}/approvals").json()["approvals"]
    assert record["decision"] == "approve" and record["reason"] is None
    again = client.responses.create(model="demo", previous_response_id=asked.id,
                                    input=[answer(approval_id, True)])
    assert again.to_dict() == done.to_dict(), "a repeat answers the same response"
    assert native(server, "POST", f"/v1/sessions/{sid}/approvals/{approval_id}",
                  json={"decision": "approve"}).status_code == 200
    with pytest.raises(openai.ConflictError) as conflict:
        client.responses.create(model="demo", previous_response_id=asked.id,
                                input=[answer(approval_id, False)])
    assert conflict.value.param == "input" and conflict.value.code == "approval_already_decided"
    assert "already approved" in conflict.value.message
    assert [e.type for e in server.events(sid)].count("approval_decided") == 1
    assert [e.type for e in server.events(sid)].count("tool_end") == 1, "ran once"

    # The conversation goes on from the newest response, not from the one that asked.
    with pytest.raises(openai.BadRequestError) as stale:
        client.responses.create(model="demo", previous_response_id=asked.id, input="more")
    assert stale.value.code == "previous_response_not_latest"
    follow = client.responses.create(model="demo", previous_response_id=done.id, input="hello")
    assert follow.status == "completed" and follow.previous_response_id == done.id


@pytest.mark.parametrize("db_backend", ["sqlite"])
def test_deny_streams_from_zero_and_the_run_goes_on_with_the_message_beside_it(
        server: Server) -> None:
    client = server.client()
    with client.responses.create(model="demo", input=SEND, stream=True) as first:
        asked = list(first)
    assert [e.sequence_number for e in asked] == list(range(len(asked)))
    assert [e.type for e in asked[-3:]] == ["response.output_item.added",
                                            "response.output_item.done", "response.completed"]
    approval_id = asked[-2].item.id
    asked_id = asked[0].response.id

    with client.responses.create(
        model="demo", previous_response_id=asked_id, stream=True,
        input=[answer(approval_id, False, reason="wrong team"),
               {"role": "user", "content": "look up the weather"}],
    ) as stream:
        got = list(stream)
    assert [e.sequence_number for e in got] == list(range(len(got))), "from 0, gapless"
    assert [e.type for e in got[:3]] == ["response.created", "response.queued",
                                         "response.in_progress"]
    final = got[-1]
    assert final.type == "response.completed"
    response = final.response
    assert response.id != asked_id and response.previous_response_id == asked_id
    denied = response.output[0]
    assert denied.type == "mcp_call" and denied.status == "failed"
    assert denied.approval_request_id == approval_id and denied.name == "send_message"
    assert denied.error is not None and "wrong team" in str(denied.error)
    assert "look up the weather" in response.output_text, "the message reached the run"
    assert [i.type for i in response.output].count("mcp_call") == 2, "denied, then lookup"

    # The stream replays, and resumes, exactly.
    replay = list(client.responses.retrieve(response.id, stream=True))
    assert [e.to_dict() for e in replay] == [e.to_dict() for e in got]
    tail = list(client.responses.retrieve(response.id, stream=True, starting_after=5))
    assert [e.to_dict() for e in tail] == [e.to_dict() for e in got[6:]]
    sid = session_of(asked_id)
    (record,) = native(server, "GET", f"/v1/sessions/{sid}/approvals").json()["approvals"]
    assert (record["decision"], record["reason"]) == ("deny", "wrong team")
    # A repeat, with the message again, sends nothing again.
    again = client.responses.create(
        model="demo", previous_response_id=asked_id,
        input=[answer(approval_id, False, reason="wrong team"),
               {"role": "user", "content": "look up the weather"}])
    assert again.id == response.id
    users = [e for e in server.events(sid) if e.type == "user_message"]
    assert [u.data["text"] for u in users] == [SEND, "look up the weather"]


@pytest.mark.parametrize("db_backend", ["sqlite"])
def test_a_decision_made_elsewhere_or_in_the_background(server: Server) -> None:
    client = server.client()
    asked = asks(client)
    approval_id = asked.output[-1].id
    sid = session_of(asked.id)
    decided = native(server, "POST", f"/v1/sessions/{sid}/approvals/{approval_id}",
                     json={"decision": "approve"})
    assert decided.status_code == 200
    # The Responses client answering the same finds the response the decision opened.
    carried = client.responses.create(model="demo", previous_response_id=asked.id,
                                      input=[answer(approval_id, True)], background=True)
    assert carried.id.endswith(f"_{decided_seq(server, sid, approval_id)}")
    wait_until(lambda: client.responses.retrieve(carried.id).status == "completed",
               what="the carried-on run")
    assert client.responses.retrieve(carried.id).output_text == "Sent, with your approval."


@pytest.mark.parametrize("db_backend", ["sqlite"])
def test_wrong_answers_are_errors_in_openais_shape(server: Server) -> None:
    client = server.client()
    asked = asks(client)
    approval_id = asked.output[-1].id

    def refused(**body: Any) -> openai.APIStatusError:
        body.setdefault("model", "demo")
        with pytest.raises(openai.APIStatusError) as exc:
            client.responses.create(**body)
        err = exc.value
        assert isinstance(err.body, dict) and set(err.body) == {"message", "type", "param",
                                                                "code"}
        assert err.body["type"] == "invalid_request_error"
        return err

    missing = refused(input=[answer(approval_id, True)])
    assert (missing.status_code, missing.param) == (400, "previous_response_id")
    unknown = refused(previous_response_id=asked.id, input=[answer("apv_nope", True)])
    assert (unknown.status_code, unknown.param) == (404, "input")
    assert isinstance(unknown, openai.NotFoundError)
    no_flag = refused(previous_response_id=asked.id,
                      input=[{"type": "mcp_approval_response",
                              "approval_request_id": approval_id}])
    assert (no_flag.status_code, no_flag.param) == (400, "input[0].approve")
    two = refused(previous_response_id=asked.id,
                  input=[answer(approval_id, True), answer(approval_id, True)])
    assert (two.status_code, two.param) == (400, "input[1]")
    pending = refused(previous_response_id=asked.id, input="did you send it?")
    assert (pending.status_code, pending.param, pending.code) == (400, "input",
                                                                  "approval_pending")
    other_model = refused(previous_response_id=asked.id, input=[answer(approval_id, True)],
                          model="demo:nope")
    assert (other_model.status_code, other_model.param) == (400, "model")

    # Another owner: neither the response nor the approval (with a response of its own).
    async def second_key() -> str:
        assert server.store is not None
        owner = await server.store.ensure_owner(f"other-{uuid.uuid4().hex[:8]}")
        key = new_key()
        await server.store.create_api_key(owner.id, hash_key(key), "other")
        return key

    other = server.client(api_key=server.call(second_key))
    with pytest.raises(openai.NotFoundError) as foreign:
        other.responses.create(model="demo", previous_response_id=asked.id,
                               input=[answer(approval_id, True)])
    assert foreign.value.param == "previous_response_id"
    theirs = other.responses.create(model="demo", input=SEND)
    with pytest.raises(openai.NotFoundError) as crossed:
        other.responses.create(model="demo", previous_response_id=theirs.id,
                               input=[answer(approval_id, True)])
    assert crossed.value.param == "input"
    sid = session_of(asked.id)
    (record,) = native(server, "GET", f"/v1/sessions/{sid}/approvals").json()["approvals"]
    assert record["decision"] is None, "nothing above decided it"

    # A run cancelled while it waited can no longer be decided; a plain follow-up is taken
    # and completes: the model is told the call did not run, and nothing asks again.
    assert native(server, "POST", f"/v1/sessions/{sid}/cancel").status_code in (200, 202)
    gone = refused(previous_response_id=asked.id, input=[answer(approval_id, True)])
    assert (gone.status_code, gone.param, gone.code) == (400, "input", "approval_not_pending")
    (record,) = native(server, "GET", f"/v1/sessions/{sid}/approvals").json()["approvals"]
    assert (record["decision"], record["reason"]) == ("deny", "cancelled")
    follow = client.responses.create(model="demo", previous_response_id=asked.id, input="hi",
                                     background=True)
    assert follow.previous_response_id == asked.id and follow.id != asked.id
    wait_until(lambda: client.responses.retrieve(follow.id).status
               not in ("queued", "in_progress"), what="the follow-up")
    done = client.responses.retrieve(follow.id)
    assert (done.status, done.error) == ("completed", None)
    assert done.output_text and done.output[-1].type == "message"
    assert not [o for o in done.output if o.type == "mcp_approval_request"]
    assert len(native(server, "GET", f"/v1/sessions/{sid}/approvals").json()["approvals"]) == 1
    assert native(server, "GET", f"/v1/sessions/{sid}").json()["session"]["status"] == \
        "succeeded"
    again = refused(previous_response_id=asked.id, input=[answer(approval_id, False)])
    assert (again.status_code, again.code) == (400, "approval_not_pending")
