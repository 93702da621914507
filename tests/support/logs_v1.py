"""The logs of tests/fixtures/logs_v1: real session logs written by the version before typed
events (b1d4810), each with what that version's reducer and projections made of it."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any

from outlive.api.agui import RunHeader, project_run
from outlive.api.aisdk import hidden_deltas, project_chat
from outlive.api.openai._projection import ResponseHeader, project
from outlive.domain.model import Event
from outlive.domain.reducer import fold

LOGS = Path(__file__).resolve().parents[1] / "fixtures" / "logs_v1"


def slices(events: list[Event], openers: tuple[str, ...]) -> list[list[Event]]:
    """Each run's slice: from the message (or, for AG-UI, the decision) that opened it to
    the `session_end` (or, for AG-UI, the approval request) that closed it."""
    out: list[list[Event]] = []
    cur: list[Event] | None = None
    for ev in events:
        if cur is None:
            if ev.type in openers and (ev.type != "user_message"
                                       or ev.data.get("delivery") == "start"):
                cur = [ev]
            continue
        cur.append(ev)
        if ev.type == "session_end" or (ev.type == "approval_requested"
                                        and "approval_decided" in openers):
            out.append(cur)
            cur = None
    return out


def _jsonable(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str))


def golden(events: list[Event]) -> dict[str, Any]:
    """What the reducer and each projection make of a log, as JSON."""
    aisdk = [project_chat(f"run_{i}", s, hidden_deltas(s))
             for i, s in enumerate(slices(events, ("user_message",)))]
    agui = [[e.model_dump(mode="json", by_alias=True, exclude_none=True) for e in
             project_run(RunHeader(thread_id="t", run_id=f"r{i}", session_id="ses"), s)]
            for i, s in enumerate(slices(events, ("user_message", "approval_decided")))]
    openai = [project(ResponseHeader(id=f"resp_{i}", model="demo:scripted"), s)
              for i, s in enumerate(slices(events, ("user_message",)))]
    return _jsonable({"reducer": fold(events), "aisdk": aisdk, "agui": agui,
                      "openai": [{"events": ev, "response": r} for ev, r in openai]})


def load(path: Path) -> tuple[list[Event], dict[str, Any]]:
    doc = json.loads(path.read_text())
    events = [Event("ses", r["seq"], datetime.fromisoformat(r["ts"]), r["attempt"], r["fence"],
                    r["type"], r["data"]) for r in doc["events"]]
    return events, doc["golden"]


def stored_rows(path: Path) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = json.loads(path.read_text())["events"]
    return rows
