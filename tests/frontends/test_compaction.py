"""A conversation long enough for its demo model's small window (the `compacting` world), in
the real client libraries: the run that compacts the context carries it as a data part
(`data-context-compacted`, kept in the AI SDK message) and as an AG-UI `CUSTOM` event named
`context_compacted` that the client's verifier accepts, each with the event's payload."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .harness import World

FOLLOW_UPS = 8


def compacted(world: World, chat: str, send: Callable[[int], dict[str, Any]],
              found: Callable[[dict[str, Any]], bool]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Sends messages until one run shows a compaction (`found`): that run's result and the
    session's first `context_compacted` event."""
    for i in range(FOLLOW_UPS):
        done = send(i)
        if found(done):
            events = world.events(world.session_of_chat(chat))
            return done, next(e for e in events if e["type"] == "context_compacted")
    raise AssertionError("no run of the conversation compacted its context")


def message(i: int) -> str:
    return f"tell me about leases, fences and gates, part {i}"


def test_ai_sdk_a_compacting_run_carries_a_data_part_kept_in_the_message(
        compacting: World) -> None:
    chat = compacting.chat_id()

    def parts(done: dict[str, Any]) -> list[dict[str, Any]]:
        return [p for p in done["messages"][-1]["parts"] if p["type"] == "data-context-compacted"]

    done, event = compacted(compacting, chat,
                            lambda i: compacting.run("aisdk.mjs", "chat", chat, message(i)),
                            lambda d: bool(parts(d)))
    assert done["errors"] == [] and done["status"] == "ready"
    assert parts(done) == [{"type": "data-context-compacted", "id": f"compaction_{event['seq']}",
                            "data": event["data"]}]
    assert event["data"]["method"] == "summary" and event["data"]["summary"]
    texts = [p["text"] for p in done["messages"][-1]["parts"] if p["type"] == "text"]
    assert texts, "the answer made from the compacted view follows"


def test_ag_ui_a_compacting_run_carries_a_custom_event_the_verifier_accepts(
        compacting: World) -> None:
    thread = compacting.chat_id()
    done, event = compacted(compacting, thread,
                            lambda i: compacting.run("agui.mjs", "run", thread, message(i)),
                            lambda d: bool(d["custom"]))
    assert done["failure"] is None and done["runError"] is None
    assert done["finished"]["outcome"]["type"] == "success"
    [custom] = done["custom"]
    assert (custom["name"], custom["value"]) == ("context_compacted", event["data"])
    types = done["types"]
    assert types.index("CUSTOM") < types.index("RUN_FINISHED")
