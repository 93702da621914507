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


def test_a_deleted_response_has_its_content_purged_after_the_grace(server: Server) -> None:
    client = server.client()
    done = client.responses.create(model="demo", input="hello")
    client.responses.delete(done.id)
    store = server.store
    assert store is not None
    rows = server.call(lambda: store._read(lambda tx: tx.fetch(  # type: ignore[attr-defined]
        "SELECT deleted_at, purge_after FROM sessions WHERE id = :id",
        {"id": session_of(done.id)})))
    assert rows and rows[0]["deleted_at"] is not None and rows[0]["purge_after"] is not None
