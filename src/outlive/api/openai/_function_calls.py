"""`function_call_output` input items: the results of a response's client tool calls on the
Responses surface (docs/client-tools.md).

A run that calls a tool of the client's (a `tools: [{type: "function", ...}]` of the request)
ends its response with `function_call` items (the response completes, as OpenAI's does). The
next request names that response as `previous_response_id` and carries one
`function_call_output` per call. Each is delivered through the store, exactly as `POST
/v1/sessions/{id}/tool-results` delivers it: the first result wins, the same again answers the
same, another is a conflict; the calls are looked for only in the owner's own response, so
another owner's answers like a missing one. The request's response is the carried-on run: the
slice that opens at the `client_tool_result` that resumed it, a new response numbered from 0.

A user message beside the items is delivered into the carried-on run (steered, as a message
sent while a call waits is), posted before the results so it cannot miss the run, and only
while a call still waits: a repeat returns the same response and sends nothing again.
"""

from __future__ import annotations

from ...domain.client_tools import ClientTool, ClientToolResultConflict, tools_to_json
from ...domain.errors import NotFound
from ...domain.model import TERMINAL, Delivery, Session
from .._context import ApiContext
from ._errors import OpenAIError, bad_request
from ._feed import ResponseFeed, ResponseRef, open_feed, resumed_seq
from ._requests import RequestInput, check_same_model, check_same_truncation

__all__ = ["answer_calls", "refuse_unanswered_calls"]

PARAM = "input"


async def answer_calls(ctx: ApiContext, owner_id: str, previous_response_id: str | None,
                       model: str | None, given: RequestInput,
                       tools: tuple[ClientTool, ...], *, truncation: str | None = None
                       ) -> ResponseRef:
    """Deliver `given`'s outputs (and send its text into the run they carry on); the
    response that opens where the run resumed."""
    if not previous_response_id:
        raise bad_request(
            "A function_call_output needs previous_response_id: the response whose "
            "function_call it answers.", "previous_response_id", "missing_required_parameter")
    previous = await open_feed(ctx, owner_id, previous_response_id, live=False,
                               param="previous_response_id")
    try:
        await previous.settle()
    finally:
        previous.close()
    calls = previous.projection.calls
    for out in given.outputs:
        if out.call_id not in calls:
            raise _unknown(out.call_id, out.where, previous)
    for call_id in sorted(given.echoed - set(calls)):
        raise bad_request(f"Only the function_call items of response '{previous.ref.id}' may "
                          f"be sent back; '{call_id}' is not one of them.", PARAM,
                          "unsupported_input")
    session = await ctx.store.get_session(owner_id, previous.ref.session_id)
    check_same_model(ctx.catalog, model, session)
    check_same_truncation(truncation, session)
    if tools and tools_to_json(tools) != tools_to_json(session.client_tools):
        raise bad_request("The tools cannot change while a run waits on its function calls: "
                          "send the same tools (or none) with their outputs.", "tools",
                          "invalid_value")
    records = {r.call_id: r for r in await ctx.store.client_tool_calls(session.id)}
    waiting = [c for c in calls if c in records and records[c].pending]
    if given.text is not None and waiting and session.status not in TERMINAL:
        await ctx.store.post_message(owner_id, session.id, given.text, mode=Delivery.STEER,
                                     client_request_id=f"openai:{calls[0]}")
    for out in given.outputs:
        try:
            await ctx.store.submit_tool_result(owner_id, session.id, out.call_id,
                                               {"output": out.output})
        except ClientToolResultConflict as exc:
            raise OpenAIError(409, f"Function call '{out.call_id}': {exc.message}; the first "
                              "result stands.", param=out.where,
                              code="function_call_output_conflict") from None
        except NotFound:
            raise _unknown(out.call_id, out.where, previous) from None
    seq = await resumed_seq(ctx, session.id, after=previous.last_seq)
    if seq is None:
        left = [r.call_id for r in await ctx.store.client_tool_calls(session.id)
                if r.pending and r.call_id in calls]
        raise bad_request(
            f"Response '{previous.ref.id}' waits on more function calls: send a "
            f"function_call_output for each of {', '.join(left) or 'its calls'} (the outputs "
            "given are kept).", PARAM, "function_call_output_missing")
    return ResponseRef(session.id, seq)


async def refuse_unanswered_calls(ctx: ApiContext, owner_id: str, previous: ResponseFeed
                                  ) -> None:
    """A plain follow-up to a response that ended with function calls: refused while the run
    waits on them (answer them), and once they were answered (the response that opened
    where the run resumed carries it on). A run cancelled while it waited can be followed
    up."""
    session = await ctx.store.get_session(owner_id, previous.ref.session_id)
    if await resumed_seq(ctx, session.id, after=previous.last_seq) is not None:
        raise bad_request(
            f"Response '{previous.ref.id}' is not the newest of its conversation: its function "
            "calls were answered, and the response that opened then carries the run on.",
            "previous_response_id", "previous_response_not_latest")
    if _waiting(session):
        raise bad_request(
            f"Response '{previous.ref.id}' waits on the results of its function calls "
            f"({', '.join(previous.projection.calls)}): send a function_call_output item for "
            "each, with this message beside them if you like.", PARAM,
            "function_call_output_pending")


def _waiting(session: Session) -> bool:
    return session.attention == "tool" and session.status not in TERMINAL


def _unknown(call_id: str, where: str, previous: ResponseFeed) -> OpenAIError:
    return OpenAIError(
        404, f"Function call '{call_id}' not found in response '{previous.ref.id}': answer the "
        "function_call items that response ended with.", param=f"{where}.call_id",
        code="function_call_not_found")
