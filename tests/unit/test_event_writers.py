"""The helpers that build events write, key for key and in the same order, the `data` the
hand-built dicts before typed payloads wrote (SQLite stores the JSON text as written)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest

from outlive.domain.approvals import Approval, Decision, decided_event
from outlive.domain.model import ErrorInfo, Status
from outlive.store._lifecycle import session_end, status_event
from outlive.tools import ToolResult


def same(got: dict[str, Any], expected: dict[str, Any]) -> None:
    assert json.dumps(got) == json.dumps(expected)


@pytest.mark.parametrize(("result", "expected"), [
    (ToolResult(True, {"n": 1}, None, 12), {"call_id": "c", "ok": True, "duration_ms": 12,
                                           "result": {"n": 1}}),
    (ToolResult(True, None, None, 0), {"call_id": "c", "ok": True, "duration_ms": 0,
                                      "result": None}),
    (ToolResult.failure("interrupted", 3, interrupted=True),
     {"call_id": "c", "ok": False, "duration_ms": 3, "error": "interrupted",
      "interrupted": True}),
    (ToolResult(False, None, {"message": "no", "retryable": False}, 5),
     {"call_id": "c", "ok": False, "duration_ms": 5,
      "error": {"message": "no", "retryable": False}}),
])
def test_tool_end_and_the_tool_result_entry(result: ToolResult, expected: dict[str, Any]) -> None:
    same(result.ended("c").new().data, expected)
    same(result.to_dict(), {k: v for k, v in expected.items() if k != "call_id"})


def test_session_end_and_session_status() -> None:
    same(session_end(Status.SUCCEEDED, None, None).data, {"status": "succeeded"})
    same(session_end(Status.CANCELLED, ErrorInfo("x", "y"), "user", attention="question",
                     dropped=(4, 5)).data,
         {"status": "cancelled", "error": {"code": "x", "message": "y"}, "reason": "user",
          "attention": "question", "dropped_inputs": [4, 5]})
    same(status_event(Status.QUEUED, 0).data(), {"status": "queued", "attempt": 0})
    same(status_event(Status.FAILED, 2, "approval", ErrorInfo("e", "m")).data(),
         {"status": "failed", "attempt": 2, "attention": "approval",
          "error": {"code": "e", "message": "m"}})


def test_approval_decided() -> None:
    now = datetime(2030, 1, 1, tzinfo=UTC)
    a = Approval("apv", "ses", "c", "rm", {"p": 1}, 1, now, now, Decision.DENY, None, True)
    same(decided_event(a).new().data, {"approval_id": "apv", "call_id": "c", "tool": "rm",
                                       "decision": "deny", "always": True})
    same(decided_event(Approval("apv", "ses", "c", "rm", {}, 1, now, now, Decision.DENY,
                                "expired")).data(),
         {"approval_id": "apv", "call_id": "c", "tool": "rm", "decision": "deny",
          "always": False, "reason": "expired"})
