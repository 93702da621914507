"""Logs written by the version before typed events still read, and read the same: every event
has its payload type, re-encoding a payload gives back the stored `data` unchanged (the types
are the writers' wire format), and the transcript reducer and the three protocol projections
make of each log exactly what that version made of it (tests/fixtures/logs_v1)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from outlive.domain.events import Unknown
from tests.support.logs_v1 import LOGS, golden, load, stored_rows

FILES = sorted(LOGS.glob("*.json"))


def test_the_corpus_has_every_behaviour() -> None:
    assert len(FILES) >= 16
    types = {r["type"] for f in FILES for r in stored_rows(f)}
    assert {"session_resumed", "approval_requested", "approval_decided", "user_question",
            "thinking_delta", "tool_progress", "incomplete", "error", "stage"} <= types


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.stem)
def test_every_stored_event_reads_as_its_type_and_encodes_back(path: Path) -> None:
    events, _ = load(path)
    for ev in events:
        payload = ev.payload
        assert not isinstance(payload, Unknown), ev.type
        assert payload.TYPE == ev.type
        assert payload.data() == ev.data, (ev.seq, ev.type)
        assert payload.new().data == ev.data


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.stem)
def test_the_reducer_and_projections_render_old_logs_as_before(path: Path) -> None:
    events, expected = load(path)
    got = without_progress(golden(events))
    # Version 3 changed how client tool calls fold, which these logs have none of.
    assert got["reducer"]["version"] == 3 and expected["reducer"]["version"] == 2
    assert {**got["reducer"], "version": 2} == expected["reducer"]
    assert got["aisdk"] == expected["aisdk"]
    assert got["agui"] == expected["agui"]
    assert got["openai"] == now_said(expected["openai"])


def without_progress(got: dict[str, Any]) -> dict[str, Any]:
    """What the projections make of a log, less what they render of `tool_progress` since
    they render it (that version sent nothing for it): the AI SDK's `data-tool-progress`
    parts, AG-UI's `tool_progress` activity snapshots, and the Responses stream's repeated
    `response.mcp_call.in_progress` with a `progress`, the numbers after them closed up."""
    aisdk = [[c for c in run if c["type"] != "data-tool-progress"] for run in got["aisdk"]]
    agui = [[e for e in run if e.get("activityType") != "tool_progress"]
            for run in got["agui"]]
    openai = []
    for run in got["openai"]:
        kept = [e for e in run["events"] if "progress" not in e]
        renumbered = [{**e, "sequence_number": i} for i, e in enumerate(kept)]
        openai.append({**run, "events": renumbered})
    return {**got, "aisdk": aisdk, "agui": agui, "openai": openai}


def now_said(openai: Any) -> Any:
    """The Responses output of that version, with the one field that changed on purpose since:
    every Response said `truncation: "disabled"`; outlive compacts a long conversation's
    context now, and says `auto` (`disabled` only for a conversation that asked for it)."""
    if isinstance(openai, dict):
        out = {k: now_said(v) for k, v in openai.items()}
        if out.get("object") == "response" and out.get("truncation") == "disabled":
            out["truncation"] = "auto"
        return out
    if isinstance(openai, list):
        return [now_said(v) for v in openai]
    return openai


def test_every_stored_event_matches_the_generated_schema() -> None:
    from jsonschema import Draft202012Validator

    from outlive.domain.event_schema import json_schema

    validator = Draft202012Validator(json_schema())
    for path in FILES:
        for row in stored_rows(path):
            errors = list(validator.iter_errors({"type": row["type"], "data": row["data"]}))
            assert not errors, (path.stem, row["seq"], row["type"], errors[0].message)
