"""The workbench's JavaScript and the event schema agree (no browser: the source is read).

`web/events.schema.json` is generated from `domain/events.py`. These tests fail when the
JavaScript handles an event type the schema lacks, reads a `data` field no type that reaches
that code has (a typo, a renamed field, a field no writer writes), or when the schema has a
session event type that neither reducer (Python `domain/reducer.py`, JS `web/reducer.js`)
handles and that is not listed below as shown by nobody, with the reason.

Where the JS reads event data: `reducer.js` (its `HANDLERS` table and the helpers its handlers
pass the data to), `watcher.js` (owner events: `REQUIRED`, `SessionWatcher.apply`),
`render.js` (`markerText`: the data of the event a marker item was made from),
`compaction.js` (every `d.field` its functions read: the data of a `compacted` marker),
`delegation.js` (every `d.field` its functions read: the data of a child marker) and
`item_times.js` (`note`: every event's `call_id`/`message_id`). `transcript_state.js` holds
the accessors (`get`, `has`), not reads of its own.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

import pytest

from outlive.domain import reducer as py_reducer
from tests.support.js_events import (
    Function,
    arrow_param,
    compared_to,
    data_reads,
    functions,
    handler_table,
    reads_of,
    string_array,
    switch_groups,
    table_of_objects,
    tokenize,
)

WEB = Path(py_reducer.__file__).resolve().parents[1] / "web"

NOT_RENDERED: Mapping[str, str] = {}
"""Session event types that neither reducer handles, each with why nobody shows it."""

OWNER_NOT_WATCHED: Mapping[str, str] = {}
"""Owner event types the web watcher ignores, each with why."""


def schema_fields(schema: Mapping[str, object]) -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    """(session, owner): event type → the `data` fields the schema gives it."""
    defs = schema["$defs"]
    assert isinstance(defs, dict)

    def log(key: str) -> dict[str, set[str]]:
        out: dict[str, set[str]] = {}
        for branch in defs[key]["oneOf"]:
            props = branch["properties"]
            ref = props["data"]["$ref"].rsplit("/", 1)[-1]
            out[props["type"]["const"]] = set(defs[ref].get("properties", {}))
        return out

    return log("SessionEvent"), log("OwnerEvent")


def python_handled() -> frozenset[str]:
    """The types `domain/reducer.py` folds: its `HANDLED_TYPES`, or, until the fold branch
    exposes that, the keys of its handler table."""
    handled = getattr(py_reducer, "HANDLED_TYPES", None)
    if handled is None:
        handled = frozenset(py_reducer._HANDLERS)
    return frozenset(handled)


def _sources() -> dict[str, str]:
    return {name: (WEB / name).read_text() for name in
            ("reducer.js", "transcript_state.js", "watcher.js", "render.js", "item_times.js",
             "compaction.js", "delegation.js")}


def reducer_reads(reducer_js: str, state_js: str) -> tuple[dict[str, dict[str, set[str]]],
                                                          dict[str, str], list[str]]:
    """What `reducer.js` does with session events: type → function → the fields it reads of
    the event's data; marker kind → the event type whose handler makes it; and its
    `EVENT_TYPES` list."""
    toks = tokenize(reducer_js)
    funcs = {**functions(tokenize(state_js)), **functions(toks)}
    reads: dict[str, dict[str, set[str]]] = {}
    markers: dict[str, str] = {}
    for event_type, (fn_name, factory_args) in handler_table(toks, "HANDLERS").items():
        fn = funcs[fn_name]
        data = arrow_param(fn.body, 2) if factory_args else fn.params[2]
        reads[event_type] = data_reads(fn, data, funcs)
        markers.update({kind: event_type for kind in _marker_kinds(fn, data)})
    return reads, markers, string_array(toks, "EVENT_TYPES")


def _marker_kinds(fn: Function, data: str) -> list[str]:
    """The `kind` of each `marker(txn, seq, "kind", data)` in `fn`."""
    body = fn.body
    return [body[k + 6].value for k in range(len(body) - 8)
            if body[k].value == "marker" and body[k + 1].value == "("
            and body[k + 6].kind == "str" and body[k + 8].value == data]


def _reached_by(reads: Mapping[str, Mapping[str, set[str]]]) -> dict[str, set[str]]:
    """function → the event types whose handling reaches it."""
    out: dict[str, set[str]] = {}
    for event_type, by_fn in reads.items():
        for fn in by_fn:
            out.setdefault(fn, set()).add(event_type)
    return out


def problems(sources: Mapping[str, str], schema: Mapping[str, object]) -> list[str]:
    """Every disagreement between the JS and the schema, as a line each."""
    session, owner = schema_fields(schema)
    found: list[str] = []

    def check(where: str, types: set[str], fields: set[str], known: Mapping[str, set[str]]) -> None:
        unknown = sorted(t for t in types if t not in known)
        found.extend(f"{where}: handles {t!r}, which the schema lacks" for t in unknown)
        have = set().union(*(known[t] for t in types if t in known))
        found.extend(f"{where}: reads data.{f} of {sorted(types)}, which the schema lacks"
                     for f in sorted(fields - have))

    reads, markers, listed = reducer_reads(sources["reducer.js"], sources["transcript_state.js"])
    for t in reads:
        check(f"reducer.js HANDLERS[{t}]", {t}, set(), session)
    for fn, types in _reached_by(reads).items():
        fields = set().union(*(reads[t][fn] for t in types))
        check(f"reducer.js {fn}()", types, fields, session)
    check("reducer.js EVENT_TYPES", set(listed), set(), session)

    render = functions(tokenize(sources["render.js"]))["markerText"]
    for labels, body in switch_groups(render.body, "item"):
        kinds = [k for k in labels if k]
        if not kinds:
            continue
        found.extend(f"render.js markerText: marker {k!r} is made by no reducer handler"
                     for k in kinds if k not in markers)
        check(f"render.js markerText {kinds}", {markers[k] for k in kinds if k in markers},
              reads_of(body, "d"), session)

    compacted = {markers.get("compacted", "context_compacted")}
    for name, fn in functions(tokenize(sources["compaction.js"])).items():
        check(f"compaction.js {name}()", compacted, reads_of(fn.body, "d"), session)

    children = {markers.get(k, k) for k in ("child_started", "child_ended")}
    for name, fn in functions(tokenize(sources["delegation.js"])).items():
        check(f"delegation.js {name}()", children, reads_of(fn.body, "d"), session)

    times = functions(tokenize(sources["item_times.js"]))
    check("item_times.js note()", set(session), reads_of(times["note"].body, "data"), session)
    check("item_times.js record()", compared_to(times["record"].body, "type"), set(), session)

    watcher_toks = tokenize(sources["watcher.js"])
    for t, fields in table_of_objects(watcher_toks, "REQUIRED").items():
        check(f"watcher.js REQUIRED[{t}]", {t}, fields, owner)
    check("watcher.js OWNER_EVENT_TYPES", set(string_array(watcher_toks, "OWNER_EVENT_TYPES")),
          set(), owner)
    apply = functions(watcher_toks)["apply"]
    check("watcher.js apply()", compared_to(apply.body, "ev.type"), set(), owner)
    check("watcher.js apply()", set(owner), reads_of(apply.body, "d"), owner)
    for labels, body in switch_groups(apply.body, "ev"):
        types = {t for t in labels if t}
        if types:
            check(f"watcher.js apply() case {sorted(types)}", types, reads_of(body, "d"), owner)
    return found


def _schema() -> dict[str, object]:
    loaded = json.loads((WEB / "events.schema.json").read_text())
    assert isinstance(loaded, dict)
    return loaded


def test_the_js_reads_only_what_the_schema_has() -> None:
    assert problems(_sources(), _schema()) == []


def test_every_session_event_type_is_rendered_by_a_reducer() -> None:
    session, owner = schema_fields(_schema())
    reads, _, _ = reducer_reads(_sources()["reducer.js"], _sources()["transcript_state.js"])
    handled = python_handled() | set(reads)
    assert set(session) - handled == set(NOT_RENDERED), "unrendered types, or a stale entry"
    watched = set(string_array(tokenize(_sources()["watcher.js"]), "OWNER_EVENT_TYPES"))
    assert set(owner) - watched == set(OWNER_NOT_WATCHED), "unwatched types, or a stale entry"


def test_the_reader_sees_the_reads_it_checks() -> None:
    """The parse finds what the JS reads, helpers included: an empty result would pass the
    check above for nothing."""
    reads, markers, _ = reducer_reads(_sources()["reducer.js"], _sources()["transcript_state.js"])
    assert set(reads) == set(schema_fields(_schema())[0])
    assert {"ok", "duration_ms", "interrupted", "result", "error"} <= reads["tool_end"]["onToolEnd"]
    assert {"args", "expires_at"} <= reads["approval_requested"]["newApproval"]
    assert reads["text_delta"]["delta"] == {"message_id", "text"}
    assert markers == {"resumed": "session_resumed", "interrupted": "session_interrupted",
                       "incomplete": "incomplete", "error": "error",
                       "compacted": "context_compacted", "budget": "budget_reached",
                       "child_started": "child_started", "child_ended": "child_ended",
                       "forked": "forked"}
    assert {"name", "args", "expires_at"} <= reads["client_tool_call"]["newClientCall"]
    assert {"ok", "reason", "resumed"} <= reads["client_tool_result"]["onClientToolResult"]
    compaction = functions(tokenize(_sources()["compaction.js"]))
    assert {"tokens_before", "tokens_after", "window"} <= reads_of(
        compaction["compactionTokens"].body, "d")
    assert {"summary", "first_seq"} <= reads_of(compaction["updateCompaction"].body, "d")


def _planted(file: str, old: str, new: str) -> dict[str, str]:
    sources = _sources()
    assert old in sources[file], f"{file} no longer has {old!r}: update the self-test"
    sources[file] = sources[file].replace(old, new, 1)
    return sources


@pytest.mark.parametrize(("file", "old", "new", "expected"), [
    ("reducer.js", 'txn.state.title = json(get(data, "title"));',
     'txn.state.title = json(get(data, "titel"));',
     'reducer.js onTitle(): reads data.titel of [\'title\']'),
    ("reducer.js", "  title: onTitle,\n", "  title: onTitle,\n  session_renamed: onTitle,\n",
     "reducer.js HANDLERS[session_renamed]: handles 'session_renamed'"),
    ("reducer.js", "function newTool(callId, data) {\n",
     "function newTool(callId, data) {\n  const seen = data.started_at;\n",
     "reducer.js newTool(): reads data.started_at of ['tool_end', 'tool_progress', 'tool_start']"),
    ("watcher.js", "next.stage = d.stage;", "next.stage = d.stage_name;",
     "watcher.js apply() case ['session_active_stage']: reads data.stage_name"),
    ("watcher.js", "session_title: { title: [", "session_title: { name: [",
     "watcher.js REQUIRED[session_title]: reads data.name"),
    ("render.js", 'if (d.reason === "crash")', 'if (d.cause === "crash")',
     "render.js markerText ['resumed']: reads data.cause of ['session_resumed']"),
    ("item_times.js", "data.call_id ?? data.message_id", "data.call_id ?? data.msg_id",
     "item_times.js note(): reads data.msg_id"),
    ("compaction.js", "count(d.tokens_after)", "count(d.tokens_later)",
     "compaction.js compactionTokens(): reads data.tokens_later of ['context_compacted']"),
    ("delegation.js", "str(d.child_id)", "str(d.child)",
     "delegation.js childLinks(): reads data.child of ['child_ended', 'child_started']"),
])
def test_a_planted_unknown_type_or_field_fails_the_check(file: str, old: str, new: str,
                                                         expected: str) -> None:
    found = problems(_planted(file, old, new), _schema())
    assert any(p.startswith(expected) for p in found), found


def test_a_type_the_schema_loses_fails_the_check() -> None:
    schema = _schema()
    defs = schema["$defs"]
    assert isinstance(defs, dict)
    defs["SessionEvent"] = {"oneOf": [b for b in defs["SessionEvent"]["oneOf"]
                                      if b["properties"]["type"]["const"] != "stage"]}
    assert "reducer.js HANDLERS[stage]: handles 'stage', which the schema lacks" in problems(
        _sources(), schema)
