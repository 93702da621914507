"""An `mcp_approval_response` input item: deciding an approval on the Responses surface.

A run that waits for a person to approve a tool call ends its response with an
`mcp_approval_request` item (the response completes, as OpenAI's does). The next request names
that response as `previous_response_id` and carries `{"type": "mcp_approval_response",
"approval_request_id", "approve", "reason"?}`. It decides through the store, exactly as
`POST /v1/sessions/{id}/approvals/{approval_id}` does: the first decision wins, the same one
again answers the same, the other is a conflict; the approval is looked for only in the
owner's own response, so another owner's answers like a missing one. The request's response
is the carried-on run: the slice that opens at the decision's `approval_decided` event, so it
is a new response, numbered from 0.

A user message beside the item is delivered into the carried-on run (steered, as a message
sent while a call waits is, docs/approvals.md), so the model sees it with the call's result,
as OpenAI's model sees every input item of one request. It is posted before the decision, so
it cannot miss the run, and only by the request that makes the decision: a repeat returns the
response the first one opened and sends nothing again.
"""

from __future__ import annotations

from ...domain.approvals import Approval, ApprovalConflict, Decision
from ...domain.errors import IllegalTransition, NotFound
from ...domain.model import TERMINAL, Delivery, Session
from .._context import ApiContext
from ._errors import OpenAIError, bad_request
from ._feed import ResponseFeed, ResponseRef, decision_seq, open_feed
from ._requests import ApprovalAnswer, check_same_model, check_same_truncation

__all__ = ["answer_approval", "refuse_unanswered"]

PARAM = "input"


async def answer_approval(ctx: ApiContext, owner_id: str, previous_response_id: str | None,
                          model: str | None, answer: ApprovalAnswer, text: str | None,
                          *, truncation: str | None = None) -> ResponseRef:
    """Decide `answer`'s approval (and send `text` into the run it carries on); the response
    that opens at the decision."""
    if not previous_response_id:
        raise bad_request(
            "An mcp_approval_response needs previous_response_id: the response whose "
            "mcp_approval_request it answers.", "previous_response_id",
            "missing_required_parameter")
    previous = await open_feed(ctx, owner_id, previous_response_id, live=False,
                               param="previous_response_id")
    try:
        await previous.settle()
    finally:
        previous.close()
    if previous.projection.awaiting != answer.approval_id:
        raise _unknown(answer, previous)
    session = await ctx.store.get_session(owner_id, previous.ref.session_id)
    check_same_model(ctx.catalog, model, session)
    check_same_truncation(truncation, session)
    approval = await _approval(ctx, session, answer, previous)
    wanted = Decision.APPROVE if answer.approve else Decision.DENY
    if approval.cancelled:
        raise _not_pending(answer, "cancelled")
    if approval.pending:
        if not _waiting(session):
            raise _not_pending(answer, session.status.value)
        if text is not None:
            await ctx.store.post_message(owner_id, session.id, text, mode=Delivery.STEER,
                                         client_request_id=f"openai:{approval.id}")
    try:
        await ctx.store.decide_approval(owner_id, session.id, approval.id, wanted,
                                        reason=answer.reason)
    except ApprovalConflict as exc:
        first = exc.details.get("decision")
        why = exc.details.get("reason")
        said = f"{'approved' if first == Decision.APPROVE.value else 'denied'}"
        if why:
            said += f" ({why})"
        raise OpenAIError(
            409, f"Approval request '{approval.id}' was already {said}; the first decision "
            "stands.", param=PARAM, code="approval_already_decided") from None
    except NotFound:
        raise _unknown(answer, previous) from None
    except IllegalTransition:
        raise _not_pending(answer, session.status.value) from None
    seq = await decision_seq(ctx, session.id, approval.id, after=previous.last_seq)
    if seq is None:  # pragma: no cover - the decision wrote it
        raise _unknown(answer, previous)
    return ResponseRef(session.id, seq)


async def refuse_unanswered(ctx: ApiContext, owner_id: str, previous: ResponseFeed) -> None:
    """A plain follow-up to a response that ended asking for an approval: refused while the
    run waits (answer it first), and once it is decided (a newer response carries the run
    on). Only a run cancelled while it waited (its approval settled `cancelled`, or left
    undecided by an older server) can be followed up."""
    approval_id = previous.projection.awaiting
    assert approval_id is not None
    session = await ctx.store.get_session(owner_id, previous.ref.session_id)
    approvals = {a.id: a for a in await ctx.store.approvals(session.id)}
    found = approvals.get(approval_id)
    if found is not None and not found.pending and not found.cancelled:
        raise bad_request(
            f"Response '{previous.ref.id}' is not the newest of its conversation: its approval "
            "request was decided, and the response that opened at the decision carries the run "
            "on.", "previous_response_id", "previous_response_not_latest")
    if _waiting(session):
        raise bad_request(
            f"Response '{previous.ref.id}' waits for a decision on approval request "
            f"'{approval_id}': answer it with an mcp_approval_response input item (approve "
            "true or false), with this message beside it if you like.", PARAM,
            "approval_pending")


async def _approval(ctx: ApiContext, session: Session, answer: ApprovalAnswer,
                    previous: ResponseFeed) -> Approval:
    for approval in await ctx.store.approvals(session.id):
        if approval.id == answer.approval_id:
            return approval
    raise _unknown(answer, previous)


def _waiting(session: Session) -> bool:
    return session.attention == "approval" and session.status not in TERMINAL


def _unknown(answer: ApprovalAnswer, previous: ResponseFeed) -> OpenAIError:
    return OpenAIError(
        404, f"Approval request '{answer.approval_id}' not found in response "
        f"'{previous.ref.id}': answer the mcp_approval_request that response ended with.",
        param=PARAM, code="approval_request_not_found")


def _not_pending(answer: ApprovalAnswer, ended: str) -> OpenAIError:
    return bad_request(
        f"Approval request '{answer.approval_id}' can no longer be decided: its run ended "
        f"({ended}) before anyone decided.", PARAM, "approval_not_pending")
