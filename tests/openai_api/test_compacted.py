"""A response whose session was compacted (docs/retention.md): retrieving it gives the same
Response as before (its text is in the authoritative `message_end`), replaying its stream is
refused with a clear error instead of renumbered events, and the conversation goes on."""

from __future__ import annotations

import openai
import pytest

from .harness import Server, session_of


def test_a_compacted_response_still_answers_and_its_stream_says_why_it_cannot(
    server: Server,
) -> None:
    client = server.client()
    done = client.responses.create(model="demo", input="hello")
    assert done.status == "completed" and done.output_text
    before = client.responses.retrieve(done.id).to_dict()
    assert server.call(lambda: server.store.compact_session(session_of(done.id)))  # type: ignore[union-attr]
    assert not any(e.type == "text_delta" for e in server.events(session_of(done.id)))

    assert client.responses.retrieve(done.id).to_dict() == before
    with pytest.raises(openai.BadRequestError) as refused:
        list(client.responses.retrieve(done.id, stream=True))
    assert refused.value.code == "response_compacted"
    assert "without stream=true" in refused.value.message

    follow = client.responses.create(model="demo", input="hello again",
                                     previous_response_id=done.id)
    assert follow.status == "completed" and "hello again" in follow.output_text
    assert follow.previous_response_id == done.id
    assert [e.to_dict() for e in client.responses.retrieve(follow.id, stream=True)]
