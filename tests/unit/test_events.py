"""The typed payloads of domain/events.py: what a writer builds is the wire format, what a
reader gets from any stored `data` (however odd) is a payload, and the checked-in JSON Schema
is the one the types generate."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from outlive.domain import events as ev
from outlive.domain.event_schema import json_schema
from outlive.domain.events import UNSET, Unknown, parse, parse_owner
from outlive.domain.model import OwnerEvent

SCHEMA = Path(ev.__file__).resolve().parents[1] / "web" / "events.schema.json"


def test_optional_fields_are_left_out_and_required_ones_always_written() -> None:
    assert ev.ToolStart(call_id="c", tool="t", arguments={}).new().data == {
        "call_id": "c", "tool": "t", "arguments": {}}
    assert ev.ToolStart(call_id="c", tool="t", arguments={}, rerun=True).data()["rerun"] is True
    assert ev.SessionResumed(reason="crash", attempt=2, repaired_tool_calls=[]).data() == {
        "reason": "crash", "attempt": 2, "repaired_tool_calls": []}
    assert ev.SessionEnd(status="succeeded").data() == {"status": "succeeded"}
    assert ev.SessionEnd(status="failed", error=ev.ErrorBody(code="x", message="y"),
                         dropped_inputs=[3]).data() == {
        "status": "failed", "error": {"code": "x", "message": "y"}, "dropped_inputs": [3]}


def test_a_result_of_none_is_written_and_an_absent_one_is_not() -> None:
    ok = ev.ToolEnd(call_id="c", ok=True, duration_ms=1, result=None).data()
    assert ok == {"call_id": "c", "ok": True, "duration_ms": 1, "result": None}
    failed = ev.ToolEnd(call_id="c", ok=False, duration_ms=1, error="no").data()
    assert "result" not in failed and failed["error"] == "no"
    read = parse("tool_end", failed)
    assert isinstance(read, ev.ToolEnd) and read.result is UNSET and not read.succeeded


def test_deltas_encode_like_every_other_payload() -> None:
    for cls in (ev.TextDelta, ev.ThinkingDelta):
        p = cls(message_id="m", text="t")
        assert p.new().data == ev.Payload.data(p)


@pytest.mark.parametrize(("event_type", "data", "expected"), [
    ("text_delta", None, ev.TextDelta(message_id=None, text="")),
    ("text_delta", [1, 2], ev.TextDelta(message_id=None, text="")),
    ("text_delta", {"message_id": "m", "text": 5}, ev.TextDelta(message_id="m", text="")),
    ("tool_end", {"call_id": "c", "ok": "yes", "duration_ms": "x"},
     ev.ToolEnd(call_id="c", ok=False, duration_ms=None)),
    ("session_end", {"status": "failed", "error": "boom"},
     ev.SessionEnd(status="failed", error="boom")),
    ("turn_start", {"message_id": "m", "inputs": [1, "a"], "extra": 1},
     ev.TurnStart(turn=None, message_id="m")),
    ("user_question", {"question": "q"},
     ev.UserQuestion(question="q", options=[], call_id=None)),
])
def test_odd_stored_data_reads_as_neutral_values(event_type: str, data: Any,
                                                 expected: ev.Payload) -> None:
    assert parse(event_type, data) == expected


def test_an_unknown_type_reads_as_unknown_and_owner_events_have_types() -> None:
    assert parse("from_the_future", {"a": 1}) == Unknown("from_the_future", {"a": 1})
    assert parse_owner("session_status", {"status": "running", "attempt": 1}) == \
        ev.SessionStatus(status="running", attempt=1)
    oe = OwnerEvent("own", 1, "ses", datetime.now(UTC), "session_title", {"title": "x"})
    assert oe.payload == ev.SessionTitle(title="x")


def test_every_event_type_has_one_payload_type() -> None:
    assert len(ev.PAYLOADS) == len(ev.EVENT_TYPES) == 26
    assert ev.OWNER_EVENT_TYPES == {"session_created", "session_status", "session_deleted",
                                    "session_active_stage", "session_cancel_requested",
                                    "session_title", "schedule_fired"}


def test_the_checked_in_schema_is_the_generated_one() -> None:
    """Regenerate with: PYTHONPATH=src python -c 'import json; from outlive.domain.event_schema
    import json_schema; print(json.dumps(json_schema(), indent=1, sort_keys=True))'
    > src/outlive/web/events.schema.json"""
    assert json.loads(SCHEMA.read_text()) == json_schema()
    names = {b["properties"]["type"]["const"]
             for key in ("SessionEvent", "OwnerEvent")
             for b in json_schema()["$defs"][key]["oneOf"]}
    assert names == ev.EVENT_TYPES | ev.OWNER_EVENT_TYPES
