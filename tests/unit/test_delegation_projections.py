"""A delegation call in the three protocol projections (docs/subagents.md): the call is its
tool call, its child's progress is the call's progress, and its child's start and end are
the protocol's own sub-agent markers where it has them (AI SDK `data-subagent` parts,
AG-UI's `SUBAGENT_*`), nothing where it has none (Responses)."""

from __future__ import annotations

from outlive.api.agui import project_run
from outlive.api.aisdk import project_chat
from outlive.api.openai import ResponseHeader, project
from tests.unit.test_frontend_projections import HEADER, RUN, Log


def delegating(status: str = "succeeded", ok: bool = True) -> Log:
    log = Log().opened()
    log.add("turn_start", turn=1, message_id="msg_1")
    log.add("message_end", message_id="msg_1", text="", stop_reason="tool_use")
    log.add("tool_start", call_id="call_d", tool="agent__helper", arguments={"task": "owls"})
    log.add("child_started", call_id="call_d", child_id="ses_kid", agent="helper")
    log.add("tool_progress", call_id="call_d", message="helper: running slow_task")
    log.add("tool_progress", call_id="call_d", message="helper: slow_task: step 1 of 3")
    log.add("child_ended", call_id="call_d", child_id="ses_kid", status=status)
    log.add("session_resumed", reason="children", attempt=1, repaired_tool_calls=[])
    if ok:
        log.add("tool_end", call_id="call_d", ok=True, duration_ms=5,
                result={"child_id": "ses_kid", "agent": "helper", "answer": "hoot"})
    else:
        log.add("tool_end", call_id="call_d", ok=False, duration_ms=5,
                error={"message": "sub-agent helper failed: boom"})
    log.answer("msg_2", "Done.")
    return log.end("succeeded")


def test_the_ai_sdk_shows_the_child_and_its_progress_on_the_calls_tool_part() -> None:
    chunks = project_chat(RUN, delegating().events)
    mine = [c for c in chunks if c["type"].startswith(("tool-", "data-"))]
    assert [c["type"] for c in mine] == [
        "tool-input-start", "tool-input-delta", "tool-input-available", "data-subagent",
        "data-tool-progress", "data-tool-progress", "data-subagent", "tool-output-available"]
    assert mine[3] == {"type": "data-subagent", "id": "ses_kid", "data": {
        "child_id": "ses_kid", "agent": "helper", "toolCallId": "call_d", "status": "running"}}
    assert mine[5]["id"] == "progress_call_d"  # each report replaces the last in the client
    assert mine[5]["data"] == {"toolCallId": "call_d",
                               "message": "helper: slow_task: step 1 of 3"}
    assert mine[6]["id"] == "ses_kid" and mine[6]["data"]["status"] == "succeeded"
    assert mine[7]["output"]["answer"] == "hoot"


def test_ag_ui_marks_the_sub_agent_on_its_parent_tool_call() -> None:
    out = [e.model_dump(mode="json", by_alias=True, exclude_none=True)
           for e in project_run(HEADER, delegating().events)]
    mine = [e for e in out if e["type"].startswith(("TOOL_CALL", "SUBAGENT", "ACTIVITY"))]
    assert [e["type"] for e in mine] == [
        "TOOL_CALL_START", "TOOL_CALL_ARGS", "TOOL_CALL_END", "SUBAGENT_STARTED",
        "ACTIVITY_SNAPSHOT", "ACTIVITY_SNAPSHOT", "SUBAGENT_FINISHED", "TOOL_CALL_RESULT"]
    started = mine[3]
    assert (started["subagentRunId"], started["name"], started["parentToolCallId"]) == (
        "ses_kid", "helper", "call_d")
    assert mine[4]["activityType"] == "tool_progress" and mine[4]["replace"] is True
    assert mine[5]["content"] == {"toolCallId": "call_d",
                                  "message": "helper: slow_task: step 1 of 3"}
    assert mine[6]["outcome"] == {"type": "success"}


def test_ag_ui_reports_a_child_that_did_not_succeed_as_a_sub_agent_error() -> None:
    out = [e.model_dump(mode="json", by_alias=True, exclude_none=True)
           for e in project_run(HEADER, delegating("failed", ok=False).events)]
    (err,) = [e for e in out if e["type"] == "SUBAGENT_ERROR"]
    assert (err["subagentRunId"], err["code"]) == ("ses_kid", "failed")
    (result,) = [e for e in out if e["type"] == "TOOL_CALL_RESULT"]
    assert "boom" in result["content"]  # never a success


def test_responses_show_the_childs_progress_on_the_calls_mcp_call() -> None:
    events, response = project(ResponseHeader(id="resp_1", model="demo:scripted"),
                               delegating().events)
    calls = [e for e in events if e["type"].startswith("response.mcp_call")]
    assert [e["type"] for e in calls] == [
        "response.mcp_call.in_progress", "response.mcp_call_arguments.delta",
        "response.mcp_call_arguments.done", "response.mcp_call.in_progress",
        "response.mcp_call.in_progress", "response.mcp_call.completed"]
    assert [e.get("progress") for e in calls[3:5]] == [
        "helper: running slow_task", "helper: slow_task: step 1 of 3"]
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    (item,) = [i for i in response["output"] if i["type"] == "mcp_call"]
    assert item["name"] == "agent__helper" and item["status"] == "completed"
