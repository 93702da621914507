"""Function calling through the official `openai` SDK against a real server
(docs/client-tools.md): `tools: [{type: "function"}]` are the session's client tools; the
response that calls one completes with `function_call` items; `function_call_output` items on
the next request (with `previous_response_id`) deliver the results through the store, and the
run carries on in a response that opens there. The stream shows the arguments; a repeat
answers the same; bad items, hosted tools and other owners' calls are errors in OpenAI's
shape."""

from __future__ import annotations

import json
import uuid
from typing import Any

import openai
import pytest

from outlive.api import hash_key, new_key

from .harness import Server, session_of

WEATHER = {"type": "function", "name": "get_weather", "description": "The weather in a city.",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                          "required": ["city"], "additionalProperties": False},
           "strict": True}
PROMPT = 'call get_weather {"city": "Oslo"}'


def get_weather(city: str) -> dict[str, Any]:
    return {"city": city, "temp_c": 21}


def output(call: Any, value: Any) -> dict[str, Any]:
    return {"type": "function_call_output", "call_id": call.call_id,
            "output": json.dumps(value)}


def test_the_sdk_function_calling_loop(server: Server) -> None:
    client = server.client()
    first = client.responses.create(model="demo", input=PROMPT, tools=[WEATHER])
    assert first.status == "completed"
    calls = [item for item in first.output if item.type == "function_call"]
    assert len(calls) == 1 and first.output[-1] is calls[-1]
    call = calls[0]
    assert (call.name, json.loads(call.arguments), call.status) == (
        "get_weather", {"city": "Oslo"}, "completed")
    assert not [item for item in first.output if item.type == "mcp_call"]

    # The application runs its function and sends the result back.
    result = get_weather(**json.loads(call.arguments))
    done = client.responses.create(model="demo", previous_response_id=first.id,
                                   input=[output(call, result)], tools=[WEATHER])
    assert done.status == "completed" and done.previous_response_id == first.id
    assert "temp_c" in done.output_text and "21" in done.output_text
    assert [item.type for item in done.output] == ["message"]
    sid = session_of(first.id)
    (resumed,) = [e.seq for e in server.events(sid) if e.type == "client_tool_result"]
    assert done.id == f"resp_{sid.removeprefix('ses_')}_{resumed}"

    # A repeat of the same output answers with the same response; another is a 409.
    again = client.responses.create(model="demo", previous_response_id=first.id,
                                    input=[output(call, result)])
    assert again.id == done.id and again.output_text == done.output_text
    with pytest.raises(openai.ConflictError) as conflict:
        client.responses.create(model="demo", previous_response_id=first.id,
                                input=[output(call, {"other": 1})])
    assert conflict.value.code == "function_call_output_conflict"
    # The conversation goes on from the carried-on response, and is linear.
    follow = client.responses.create(model="demo", previous_response_id=done.id,
                                     input="thanks")
    assert follow.status == "completed" and follow.previous_response_id == done.id
    assert client.responses.retrieve(follow.id).previous_response_id == done.id
    with pytest.raises(openai.BadRequestError) as stale:
        client.responses.create(model="demo", previous_response_id=first.id, input="hm")
    assert stale.value.code == "previous_response_not_latest"
    types = [e.type for e in server.events(sid)]
    assert types.count("client_tool_call") == types.count("client_tool_result") == 1


def test_the_stream_shows_the_arguments_and_completes_at_the_call(server: Server) -> None:
    client = server.client()
    with client.responses.stream(model="demo", input=PROMPT, tools=[WEATHER]) as stream:
        events = list(stream)
        final = stream.get_final_response()
    kinds = [e.type for e in events]
    assert "response.function_call_arguments.delta" in kinds
    done = next(e for e in events if e.type == "response.function_call_arguments.done")
    assert json.loads(done.arguments) == {"city": "Oslo"}
    assert kinds[-1] == "response.completed" and final.status == "completed"
    call = final.output[-1]
    assert call.type == "function_call"
    # The results' response streams too, from sequence_number 0.
    follow = client.responses.create(model="demo", previous_response_id=final.id,
                                     input=[output(call, {"temp_c": 5})], stream=True)
    seen = list(follow)
    assert seen[0].sequence_number == 0 and seen[-1].type == "response.completed"
    assert "temp_c" in seen[-1].response.output_text


def test_refusals_are_openai_errors(server: Server) -> None:
    client = server.client()
    with pytest.raises(openai.BadRequestError) as hosted:
        client.responses.create(model="demo", input="hi", tools=[{"type": "web_search"}])
    assert hosted.value.param == "tools[0].type"
    with pytest.raises(openai.BadRequestError) as clash:
        client.responses.create(model="demo", input="hi", tools=[
            {"type": "function", "name": "lookup", "parameters": {"type": "object"}}])
    assert clash.value.param == "tools"
    with pytest.raises(openai.BadRequestError) as bad:
        client.responses.create(model="demo", input="hi", tools=[
            {"type": "function", "name": "a b"}])
    assert bad.value.param == "tools"
    for choice in ({"type": "web_search_preview"}, {"type": "allowed_tools", "tools": []},
                   {"type": "function"}, "sometimes",
                   {"type": "function", "name": "not_offered"}):
        with pytest.raises(openai.BadRequestError) as refused:
            client.responses.create(model="demo", input="hi", tools=[WEATHER],
                                    tool_choice=choice)  # type: ignore[arg-type]
        assert refused.value.param == "tool_choice", choice

    first = client.responses.create(model="demo", input=PROMPT, tools=[WEATHER])
    call = first.output[-1]
    with pytest.raises(openai.BadRequestError) as no_previous:
        client.responses.create(model="demo", input=[output(call, 1)])
    assert no_previous.value.param == "previous_response_id"
    with pytest.raises(openai.NotFoundError) as unknown:
        client.responses.create(model="demo", previous_response_id=first.id, input=[
            {"type": "function_call_output", "call_id": "call_nope", "output": "1"}])
    assert unknown.value.code == "function_call_not_found"
    for item in ({"type": "function_call_output", "output": "1"},
                 {"type": "function_call_output", "call_id": call.call_id, "output": 5}):
        with pytest.raises(openai.BadRequestError):
            client.responses.create(model="demo", previous_response_id=first.id, input=[item])
    with pytest.raises(openai.BadRequestError) as pending:
        client.responses.create(model="demo", previous_response_id=first.id, input="hello?")
    assert pending.value.code == "function_call_output_pending"
    # Another owner's client finds no such response (a 404, as for a missing one).
    async def second_key() -> str:
        assert server.store is not None
        owner = await server.store.ensure_owner(f"other-{uuid.uuid4().hex[:8]}")
        key = new_key()
        await server.store.create_api_key(owner.id, hash_key(key), "other")
        return key

    other = server.client(api_key=server.call(second_key))
    with pytest.raises(openai.NotFoundError) as foreign:
        other.responses.create(model="demo", previous_response_id=first.id,
                               input=[output(call, 1)])
    assert foreign.value.param == "previous_response_id"
    # The call's own item may be sent back beside its output, as the SDK's loop does.
    done = client.responses.create(model="demo", previous_response_id=first.id, input=[
        call.model_dump(exclude_none=True), output(call, {"temp_c": 1})])
    assert done.status == "completed" and "temp_c" in done.output_text
    # tool_choice "none": no function tools are offered; the demo says it has none.
    plain = client.responses.create(model="demo", input=PROMPT, tools=[WEATHER],
                                    tool_choice="none")
    assert not [i for i in plain.output if i.type == "function_call"]


def test_tool_choice_forces_a_call_and_the_response_echoes_tools_and_choice(
        server: Server) -> None:
    """A message is made to call a tool: the named function, or (`required`) a tool;
    `none` keeps even `call get_weather` from calling.
    The Response says which tools and choice it ran with; the answer after the forced
    call's result is the model's own (no second forced call)."""
    client = server.client()
    forced = client.responses.create(
        model="demo", input="hello", tools=[WEATHER],
        tool_choice={"type": "function", "name": "get_weather"})
    assert forced.status == "completed"
    assert [i.type for i in forced.output][-1] == "function_call"
    assert forced.output[-1].name == "get_weather"  # type: ignore[union-attr]
    assert forced.tool_choice.type == "function"  # type: ignore[union-attr]
    assert forced.tool_choice.name == "get_weather"  # type: ignore[union-attr]
    (tool,) = forced.tools
    assert (tool.type, tool.name, tool.strict) == ("function", "get_weather", True)
    after = client.responses.create(model="demo", previous_response_id=forced.id,
                                    input=[output(forced.output[-1], {"temp_c": 3})],
                                    tools=[WEATHER])
    assert [i.type for i in after.output] == ["message"]

    # `required`: a message the demo answers without a tool ("markdown") calls one, here
    # the demo agent's first own tool (run on the server: an mcp_call item), then the
    # model answers from its result.
    required = client.responses.create(model="demo", input="show me markdown",
                                       tools=[WEATHER], tool_choice="required")
    assert required.tool_choice == "required"
    assert [i.type for i in required.output] == ["message", "mcp_call", "message"]
    # A follow-up without a choice is back to auto: the model answers without a call.
    plain = client.responses.create(model="demo", previous_response_id=required.id,
                                    input="markdown again", tools=[WEATHER])
    assert plain.tool_choice == "auto"
    assert [i.type for i in plain.output] == ["message"]

    none = client.responses.create(model="demo", input=PROMPT, tools=[WEATHER],
                                   tool_choice="none")
    assert none.tool_choice == "none" and none.tools == []
    assert [i.type for i in none.output] == ["message"]
