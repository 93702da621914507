"""The reducer's waits on someone else (domain/reducer.py folds with them): an approval a
person decides, and a client tool call the session's client answers. Each is an item that is
`pending` until its decision or result, sets the transcript's `attention` while it waits,
and is `cancelled` by a `session_end` (in `reducer.py`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from . import events as ev
from .run_fold import decision_status
from .transcript_state import Txn, given, ident, plain_json

__all__ = ["on_approval_decided", "on_approval_requested", "on_client_tool_call",
           "on_client_tool_result"]


def _new_approval(seq: int, approval_id: Any,
                  p: ev.ApprovalRequested | ev.ApprovalDecided) -> dict[str, Any]:
    requested = p if isinstance(p, ev.ApprovalRequested) else None
    return {
        "kind": "approval",
        "seq": seq,
        "approval_id": approval_id,
        "call_id": ident(given(p.call_id)),
        "tool": plain_json(given(p.tool)),
        "args": plain_json(given(requested.args) or {}) if requested else {},
        "expires_at": plain_json(given(requested.expires_at)) if requested else None,
        "status": "pending",
    }


def on_approval_requested(txn: Txn, seq: int, p: ev.ApprovalRequested,
                           data: Mapping[str, Any]) -> None:
    approval_id = ident(given(p.approval_id))
    if txn.find("approval", approval_id) is None:
        txn.add(_new_approval(seq, approval_id, p))
    txn.state["attention"] = "approval"


def on_approval_decided(txn: Txn, seq: int, p: ev.ApprovalDecided,
                         data: Mapping[str, Any]) -> None:
    approval_id = ident(given(p.approval_id))
    i = txn.find("approval", approval_id)
    if i is None:
        i = txn.add(_new_approval(seq, approval_id, p))
    decision, reason = given(p.decision), given(p.reason)
    item = txn.item(i)
    item["status"] = decision_status(decision if isinstance(decision, str) else None, reason)
    item["reason"] = reason if isinstance(reason, str) else None
    item["always"] = p.always is True
    txn.state["attention"] = None


def _new_client_call(seq: int, call_id: Any, p: ev.ClientToolCall | ev.ClientToolResult
                     ) -> dict[str, Any]:
    called = p if isinstance(p, ev.ClientToolCall) else None
    return {
        "kind": "client_tool",
        "seq": seq,
        "call_id": call_id,
        "name": plain_json(given(p.name)),
        "args": plain_json(given(called.args) or {}) if called else {},
        "expires_at": plain_json(given(called.expires_at)) if called else None,
        "status": "pending",
    }


def on_client_tool_call(txn: Txn, seq: int, p: ev.ClientToolCall,
                         data: Mapping[str, Any]) -> None:
    call_id = ident(given(p.call_id))
    if txn.find("client_tool", call_id) is None:
        txn.add(_new_client_call(seq, call_id, p))
    txn.state["attention"] = "tool"


def on_client_tool_result(txn: Txn, seq: int, p: ev.ClientToolResult,
                           data: Mapping[str, Any]) -> None:
    call_id = ident(given(p.call_id))
    i = txn.find("client_tool", call_id)
    if i is None:
        i = txn.add(_new_client_call(seq, call_id, p))
    reason = given(p.reason)
    txn.item(i)["status"] = ("answered" if p.ok is True
                             else "expired" if reason == "expired" else "failed")
    if p.resumed is True:
        txn.item(i)["resumed_seq"] = seq  # where the run its results resumed carried on
        if txn.state["attention"] == "tool":
            txn.state["attention"] = None
