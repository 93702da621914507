"""`truncation` and `usage` through the official `openai` SDK: `auto` (what outlive does anyway:
it compacts a long conversation's context) is echoed, `disabled` is kept in the session's
metadata for the runtime to honour and echoed on every response of the conversation, which
keeps it; the Response's usage is the sum of its model calls' reported usage."""

from __future__ import annotations

from typing import Any

import openai
import pytest

from outlive.domain.model import TRUNCATION_KEY

from .harness import Server, session_of


def session_metadata(server: Server, response_id: str) -> dict[str, Any]:
    async def read() -> dict[str, Any]:
        assert server.store is not None
        session = await server.store.load_session(session_of(response_id))
        return dict(session.metadata or {})

    return server.call(read)


def test_auto_is_the_default_and_disabled_is_kept_for_the_conversation(server: Server) -> None:
    client = server.client()
    plain = client.responses.create(model="demo", input="hello")
    assert plain.truncation == "auto"
    assert client.responses.create(model="demo", input="hi", truncation="auto").truncation == \
        "auto"
    assert TRUNCATION_KEY not in session_metadata(server, plain.id)

    off = client.responses.create(model="demo", input="hello", truncation="disabled",
                                  metadata={"ticket": "7"})
    assert off.status == "completed" and off.truncation == "disabled"
    assert off.metadata == {"ticket": "7"}, "outlive's own key is not the client's metadata"
    assert session_metadata(server, off.id) == {"ticket": "7", TRUNCATION_KEY: "disabled"}
    assert client.responses.retrieve(off.id).truncation == "disabled"

    kept = client.responses.create(model="demo", input="and more", previous_response_id=off.id)
    assert kept.truncation == "disabled", "a follow-up keeps the conversation's setting"
    again = client.responses.create(model="demo", input="once more", truncation="disabled",
                                    previous_response_id=kept.id)
    assert again.status == "completed"
    with pytest.raises(openai.BadRequestError) as changed:
        client.responses.create(model="demo", input="now compact", truncation="auto",
                                previous_response_id=again.id)
    assert changed.value.param == "truncation"


def test_a_bad_truncation_and_outlives_own_metadata_keys_are_refused(server: Server) -> None:
    client = server.client()
    bodies: list[dict[str, Any]] = [
        {"truncation": "sometimes"},
        {"metadata": {TRUNCATION_KEY: "disabled"}},
    ]
    params = ["truncation", f"metadata.{TRUNCATION_KEY}"]
    for body, param in zip(bodies, params, strict=True):
        with pytest.raises(openai.BadRequestError) as refused:
            client.responses.create(model="demo", input="x", **body)
        assert refused.value.param == param, body
        assert refused.value.code == "invalid_value"


def test_usage_is_the_sum_of_the_model_calls_usage(server: Server) -> None:
    client = server.client()
    done = client.responses.create(model="demo", input="look up the weather in Paris")
    events = server.events(session_of(done.id))
    used = [e.data["usage"] for e in events if e.type == "message_end" and e.data.get("usage")]
    assert len(used) >= 2, "a tool call and the answer after it: two model calls"
    assert done.usage is not None
    assert done.usage.input_tokens == sum(u["input_tokens"] for u in used)
    assert done.usage.output_tokens == sum(u["output_tokens"] for u in used)
    assert done.usage.total_tokens == done.usage.input_tokens + done.usage.output_tokens
