"""The wait on a person's answer to a question (`ask_user`), as a span of the run their answer
starts (docs/tracing.md). The run that asked has ended by then, and the wait spanned no
process: the span is written afterwards, from the question's event to the answer's."""

from __future__ import annotations

from collections.abc import Sequence

from .. import tracing
from ..domain.events import UserQuestion
from ..domain.model import Event
from ..store import EventLogStore

__all__ = ["trace_question_wait"]

_LOOK_BACK = 16
"""Events before the answer searched for the question (it is a few events before)."""


async def trace_question_wait(store: EventLogStore, session_id: str,
                              inputs: Sequence[Event] | None) -> None:
    """`inputs`: the messages waiting at the claim; the first answers the question. Nothing
    when tracing is off or the question is not found near the answer."""
    if not tracing.on() or not inputs:
        return
    answer = inputs[0]
    events = await store.read_events(session_id, after=max(0, answer.seq - _LOOK_BACK),
                                     limit=_LOOK_BACK)
    asked = [e for e in events if e.seq < answer.seq and e.type == "user_question"]
    if not asked:
        return
    question = asked[-1]
    payload = question.payload
    call_id = payload.call_id if isinstance(payload, UserQuestion) else None
    tracing.record_wait("user", question.ts, answer.ts, {
        "gen_ai.tool.name": "ask_user", "gen_ai.tool.call.id": call_id,
        "outlive.session_id": session_id})
