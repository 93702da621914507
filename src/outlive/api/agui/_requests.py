"""What an AG-UI client posts (`RunAgentInput`), and the text a new run starts with.

The new run's input is the last user message, or, when the previous run ended on a question
(an `interrupt` outcome), the answer a `resume[]` entry gives to it. An entry must answer the
question that is pending on that thread: a client cannot answer one that is not (409).

`tools` are the client's front-end tools: the session's client tools for that run on
(docs/client-tools.md). The `role: "tool"` messages that end `messages` are the results of the
run's client tool calls (`tool_answers`): the content parsed as JSON when it is JSON, else the
text; a message with `error` is the call's error.
"""

from __future__ import annotations

import json
from typing import Any

from ag_ui.core import RunAgentInput
from pydantic import ValidationError

from ...domain.client_tools import ClientTool, parse_client_tools
from ...domain.model import Session
from .._context import ApiContext
from .._errors import ApiError
from ._messages import question_id

__all__ = ["approval_decision", "front_end_tools", "parse_input", "pending_question",
           "run_text", "tool_answers"]


def parse_input(body: dict[str, Any]) -> RunAgentInput:
    try:
        return RunAgentInput.model_validate(body)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first.get("loc", ()))
        raise ApiError(400, "INVALID_INPUT", f"not a RunAgentInput: {where}: {first['msg']}"
                       ) from None


async def pending_question(ctx: ApiContext, session: Session) -> str | None:
    """The interrupt id of the question the thread waits on, if it does."""
    _, state = await ctx.snapshots.at(session.id, session.last_seq)
    if not state.get("question"):
        return None
    for item in reversed(state.get("items", [])):
        if item.get("kind") == "question":
            return question_id(int(item["seq"]))
    return None


def approval_decision(run: RunAgentInput, approval_ids: set[str]
                      ) -> tuple[str, str, str | None] | None:
    """The `(approval id, decision, reason)` a `resume[]` entry gives to one of the thread's
    approvals, if one does: `payload.approved` true approves; false, or a cancelled entry,
    denies."""
    for entry in run.resume or []:
        if entry.interrupt_id not in approval_ids:
            continue
        payload = entry.payload if isinstance(entry.payload, dict) else {}
        reason = payload.get("reason")
        approved = entry.status == "resolved" and (
            payload.get("approved") is True or entry.payload is True)
        return (entry.interrupt_id, "approve" if approved else "deny",
                reason if isinstance(reason, str) and reason else None)
    return None


def front_end_tools(run: RunAgentInput) -> tuple[ClientTool, ...]:
    """The run's `tools` as client tools, checked (a 400 for a bad one)."""
    return parse_client_tools([
        {"name": t.name, "description": t.description,
         **({"parameters": t.parameters} if t.parameters is not None else {})}
        for t in run.tools or []])


def _result_of(content: str, error: str | None) -> dict[str, Any]:
    if error is not None:
        return {"error": {"message": error[:4000] or "failed"}}
    try:
        return {"output": json.loads(content)}
    except ValueError:
        return {"output": content}


def tool_answers(run: RunAgentInput) -> dict[str, dict[str, Any]]:
    """The results the trailing `role: "tool"` messages give (call id to `{"output"}` or
    `{"error": {"message"}}`); empty when the input does not end with one."""
    out: dict[str, dict[str, Any]] = {}
    trailing = []
    for message in reversed(run.messages):
        if message.role != "tool":
            break
        trailing.append(message)
    for message in reversed(trailing):
        call_id = getattr(message, "tool_call_id", None)
        if not isinstance(call_id, str) or not 0 < len(call_id) <= 200:
            raise ApiError(400, "INVALID_INPUT",
                           "a tool message's toolCallId must be 1 to 200 characters")
        out[call_id] = _result_of(_content_text(getattr(message, "content", "")),
                                  getattr(message, "error", None))
    return out


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(getattr(p, "text", "") or "" for p in content
                       if getattr(p, "type", None) == "text")
    return ""


def _answer_text(payload: Any) -> str:
    if isinstance(payload, str):
        return payload
    if isinstance(payload, dict) and isinstance(payload.get("answer"), str):
        return str(payload["answer"])
    return "" if payload is None else json.dumps(payload, ensure_ascii=False)


def run_text(run: RunAgentInput, question: str | None) -> str:
    """The text that opens the run."""
    answers: list[str] = []
    for entry in run.resume or []:
        if entry.interrupt_id != question:
            raise ApiError(409, "INTERRUPT_NOT_PENDING",
                           f"interrupt {entry.interrupt_id!r} is not pending on this thread",
                           pending=question)
        if entry.status == "resolved":
            answers.append(_answer_text(entry.payload))
    if answers:
        text = "\n".join(a for a in answers if a)
    else:
        last = run.messages[-1] if run.messages else None
        if last is None or last.role != "user":
            raise ApiError(400, "INVALID_INPUT",
                           "the run needs a new user message (or a resume[] answer) last")
        text = _content_text(last.content)
    if not text.strip():
        raise ApiError(400, "INVALID_INPUT", "the new message has no text")
    return text
