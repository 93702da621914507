"""The client against scripted HTTP answers (httpx.MockTransport): configuration, error
mapping, cancel's 409 rule, pagination, and the stream's reconnect/dedup/gap rules."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from outlive.client import (
    DEFAULT_KEY_FILE,
    ApiError,
    AsyncClient,
    AttachedFrame,
    CancelResult,
    CaughtUpFrame,
    Client,
    ConflictError,
    EventRecord,
    NotFoundError,
    ProtocolError,
    ServerError,
    SnapshotFrame,
    TransportError,
    UnauthorizedError,
    ValidationFailedError,
    find_api_key,
    key_file_for,
)
from outlive.client._constants import DEFAULT_URL
from outlive.client._frames import STUCK_LIMIT

TS = "2030-01-01T00:00:00Z"


def session_json(sid: str = "ses_1", status: str = "queued") -> dict[str, Any]:
    return {"id": sid, "agent": "demo", "model": "demo:scripted", "title": None,
            "title_state": "pending", "status": status, "stage": None, "attempt": 0,
            "last_seq": 1, "error": None, "created_at": TS, "updated_at": TS,
            "metadata": {}, "cancel_requested": False, "abandon_after": None}


def error(http_status: int, code: str, message: str = "no", **extra: Any) -> httpx.Response:
    return httpx.Response(http_status,
                          json={"error": {"code": code, "message": message, **extra}})


def frame(event: str, data: Any, id: int | None = None) -> str:
    head = f"id: {id}\n" if id is not None else ""
    return f"{head}event: {event}\ndata: {json.dumps(data)}\n\n"


def ev(seq: int, type_: str = "text_delta", **data: Any) -> str:
    return frame(type_, {"seq": seq, "ts": TS, "type": type_, "data": data, "attempt": 1,
                         "fence": 1}, seq)


def sse(*frames: str) -> httpx.Response:
    return httpx.Response(200, headers={"content-type": "text/event-stream"},
                          content="".join(frames).encode())


class Script:
    """Answers requests in order, recording them."""

    def __init__(self, *answers: httpx.Response | Callable[[httpx.Request], httpx.Response]
                 ) -> None:
        self.answers = list(answers)
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        answer = self.answers.pop(0)
        return answer(request) if callable(answer) else answer


def aclient(script: Script, **kw: Any) -> AsyncClient:
    return AsyncClient("http://test", "olk_key", transport=httpx.MockTransport(script), **kw)


# ---- configuration ----------------------------------------------------------------------


async def test_url_and_key_from_the_environment(monkeypatch):
    monkeypatch.setenv("OUTLIVE_URL", "http://env.example:9999/prefix/")
    monkeypatch.setenv("OUTLIVE_API_KEY", "olk_env")
    script = Script(httpx.Response(200, json={"sessions": [], "next_cursor": None}))
    async with AsyncClient(transport=httpx.MockTransport(script)) as c:
        assert c.base_url == "http://env.example:9999/prefix"
        await c.list_sessions(status="running", limit=5)
    req = script.requests[0]
    assert str(req.url) == "http://env.example:9999/prefix/v1/sessions?status=running&limit=5"
    assert req.headers["authorization"] == "Bearer olk_env"


def test_defaults_without_environment(monkeypatch, tmp_path):
    monkeypatch.delenv("OUTLIVE_URL", raising=False)
    monkeypatch.delenv("OUTLIVE_API_KEY", raising=False)
    monkeypatch.chdir(tmp_path)  # no ./outlive.db.key here
    script = Script(error(401, "UNAUTHORIZED", "a valid API key is required"))
    with Client(transport=httpx.MockTransport(script)) as c:
        assert c.base_url == DEFAULT_URL
        with pytest.raises(UnauthorizedError):
            c.get_session("ses_1")
    assert "authorization" not in script.requests[0].headers


def sent_key(client_class: type[AsyncClient] | type[Client], **kw: Any) -> str | None:
    """The Authorization header a client built with `kw` sends (no request is made)."""
    client = client_class("http://test", **kw)
    header = client._http.headers.get("authorization")
    return header.removeprefix("Bearer ") if header else None


@pytest.mark.parametrize("client_class", [AsyncClient, Client])
def test_key_falls_back_to_the_key_file_serve_writes_here(monkeypatch, tmp_path, client_class):
    """Like the CLI: with no key passed and no OUTLIVE_API_KEY, the key `outlive serve` keeps
    beside its default database in the current directory (./outlive.db.key) is sent."""
    monkeypatch.delenv("OUTLIVE_API_KEY", raising=False)
    monkeypatch.delenv("OUTLIVE_DB", raising=False)
    monkeypatch.chdir(tmp_path)
    assert sent_key(client_class) is None
    (tmp_path / DEFAULT_KEY_FILE).write_text("olk_from_file\n")
    assert DEFAULT_KEY_FILE == "outlive.db.key"
    assert sent_key(client_class) == "olk_from_file"
    assert find_api_key() == "olk_from_file"
    # the environment and an explicit key come first, in that order
    monkeypatch.setenv("OUTLIVE_API_KEY", "olk_env")
    assert sent_key(client_class) == "olk_env"
    assert sent_key(client_class, api_key="olk_given") == "olk_given"


def test_the_key_file_follows_the_database_serve_was_given(monkeypatch, tmp_path):
    """The CLI's rule (cli/local_key.py uses `key_file_for` too): a SQLite file's key beside
    it, PostgreSQL's in ./outlive.key."""
    monkeypatch.delenv("OUTLIVE_API_KEY", raising=False)
    (tmp_path / "outlive.key").write_text("olk_pg\n")
    (tmp_path / "other.db.key").write_text("olk_other\n")
    monkeypatch.setenv("OUTLIVE_DB", "postgresql://127.0.0.1/x")
    assert find_api_key(cwd=tmp_path) == "olk_pg"
    monkeypatch.setenv("OUTLIVE_DB", "sqlite:///./other.db")
    assert find_api_key(cwd=tmp_path) == "olk_other"
    assert key_file_for("sqlite:////var/lib/o.db") == Path("/var/lib/o.db.key")


def test_an_empty_or_unreadable_key_file_is_no_key(monkeypatch, tmp_path):
    monkeypatch.delenv("OUTLIVE_API_KEY", raising=False)
    monkeypatch.delenv("OUTLIVE_DB", raising=False)
    (tmp_path / DEFAULT_KEY_FILE).write_text("\n")
    assert find_api_key(cwd=tmp_path) is None
    (tmp_path / DEFAULT_KEY_FILE).unlink()
    (tmp_path / DEFAULT_KEY_FILE).mkdir()  # reading it fails with an OSError
    assert find_api_key(cwd=tmp_path) is None


# ---- errors -----------------------------------------------------------------------------


async def test_error_bodies_become_typed_errors():
    script = Script(
        error(404, "NOT_FOUND", "session ses_x not found"),
        error(422, "VALIDATION_ERROR", "prompt: too short", errors=[{"loc": ["prompt"]}]),
        httpx.Response(502, text="<html>bad gateway</html>"),
    )
    async with aclient(script) as c:
        with pytest.raises(NotFoundError) as nf:
            await c.get_session("ses/x")
        with pytest.raises(ValidationFailedError) as ve:
            await c.create_session("")
        with pytest.raises(ServerError) as se:
            await c.list_sessions()
    assert (nf.value.status, nf.value.code, nf.value.message) == (
        404, "NOT_FOUND", "session ses_x not found")
    assert script.requests[0].url.raw_path == b"/v1/sessions/ses%2Fx"
    assert ve.value.details == {"errors": [{"loc": ["prompt"]}]}
    assert se.value.code == "HTTP_502" and "bad gateway" in se.value.message
    assert isinstance(se.value, ApiError)


async def test_network_failure_is_a_transport_error():
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused", request=request)

    async with aclient(Script(refuse)) as c:
        with pytest.raises(TransportError):
            await c.healthz()


# ---- cancel -----------------------------------------------------------------------------


async def test_cancel_already_terminal_is_success_with_that_status():
    script = Script(
        httpx.Response(202, json={"cancel_requested": True, "status": "running"}),
        error(409, "SESSION_ALREADY_TERMINAL", "session already failed", status="failed"),
    )
    async with aclient(script) as c:
        assert await c.cancel("ses_1") == CancelResult(cancel_requested=True, status="running")
        assert await c.cancel("ses_1") == CancelResult(
            cancel_requested=False, status="failed", already_terminal=True)
    assert script.requests[0].method == "POST"
    assert script.requests[0].url.path == "/v1/sessions/ses_1/cancel"


@pytest.mark.parametrize("answer", [
    error(409, "SESSION_BUSY", "busy"),
    error(409, "SESSION_ALREADY_TERMINAL", "odd", status="running"),
    error(409, "SESSION_ALREADY_TERMINAL", "no status"),
])
def test_cancel_other_conflicts_raise(answer):
    with Client("http://test", "k", transport=httpx.MockTransport(Script(answer))) as c, \
            pytest.raises(ConflictError):
        c.cancel("ses_1")


# ---- pagination, bodies -------------------------------------------------------------------


async def test_list_all_sessions_follows_every_cursor():
    script = Script(
        httpx.Response(200, json={"sessions": [session_json("ses_3"), session_json("ses_2")],
                                  "next_cursor": "ses_2"}),
        httpx.Response(200, json={"sessions": [session_json("ses_1")], "next_cursor": None}),
    )
    async with aclient(script) as c:
        sessions = await c.list_all_sessions(page_size=2)
    assert [s.id for s in sessions] == ["ses_3", "ses_2", "ses_1"]
    assert script.requests[1].url.params["cursor"] == "ses_2"


async def test_request_bodies_leave_out_unset_fields():
    script = Script(
        httpx.Response(202, json=session_json()),
        httpx.Response(202, json={"seq": 4, "delivery": "steer", "requeued": False}),
    )
    async with aclient(script) as c:
        await c.create_session("hi", title="t", metadata={"k": 1})
        post = await c.send_message("ses_1", "more", client_request_id="r1")
    assert json.loads(script.requests[0].content) == {"prompt": "hi", "title": "t",
                                                      "metadata": {"k": 1}}
    assert json.loads(script.requests[1].content) == {"text": "more", "client_request_id": "r1"}
    assert post.seq == 4 and post.delivery == "steer"


# ---- the session stream -------------------------------------------------------------------


async def test_stream_reconnects_resumes_and_drops_duplicates():
    script = Script(
        error(503, "STORE_UNAVAILABLE", "down"),
        sse(frame("attached", {"last_seq": 4, "status": "running"}),
            frame("snapshot", {"seq": 2, "state": {"seq": 2}}, 2),
            ev(3, text="a"), ev(4, text="b")),  # then the server goes away
        httpx.Response(200, headers={"content-type": "text/html"}, text="proxy page"),
        sse(frame("attached", {"last_seq": 6, "status": "running"}),
            ev(4, text="b"), ev(5, text="c"), frame("caught_up", {"replayed": 2}),
            ": ping\n\n", ev(6, "session_end", status="succeeded"), ev(7, text="never")),
    )
    async with aclient(script) as c:
        items = [i async for i in c.stream("ses_1", until_end=True)]
    kinds = [type(i).__name__ for i in items]
    assert kinds == ["AttachedFrame", "SnapshotFrame", "EventRecord", "EventRecord",
                     "AttachedFrame", "EventRecord", "CaughtUpFrame", "EventRecord"]
    assert [i.seq for i in items if isinstance(i, EventRecord)] == [3, 4, 5, 6]
    assert "last-event-id" not in script.requests[1].headers
    assert script.requests[2].headers["last-event-id"] == "4"
    assert script.requests[3].headers["last-event-id"] == "4"
    assert script.requests[3].url.params["until"] == "end"
    assert script.requests[3].headers["accept"] == "text/event-stream"


async def test_stream_reconnects_from_the_cursor_when_an_event_is_missing():
    script = Script(
        sse(frame("attached", {"last_seq": 5, "status": "running"}), ev(3), ev(5)),
        sse(frame("attached", {"last_seq": 5, "status": "succeeded"}), ev(4), ev(5),
            frame("caught_up", {"replayed": 2})),
    )
    async with aclient(script) as c:
        items = [i async for i in c.stream("ses_1", after=2, until_end=True)]
    assert script.requests[0].headers["last-event-id"] == "2"
    assert script.requests[1].headers["last-event-id"] == "3"
    assert [i.seq for i in items if isinstance(i, EventRecord)] == [3, 4, 5]
    assert isinstance(items[-1], CaughtUpFrame)  # ended session: done at caught_up


async def test_stream_raises_errors_that_will_not_heal():
    script = Script(error(503, "X", "down"), error(404, "NOT_FOUND", "gone"))
    async with aclient(script) as c:
        with pytest.raises(NotFoundError):
            async for _ in c.stream("ses_1"):
                pass
    assert len(script.requests) == 2


async def test_stream_resync_snapshot_replaces_the_cursor():
    script = Script(
        sse(frame("attached", {"last_seq": 3, "status": "succeeded"}),
            frame("resync", {"reason": "cursor_ahead", "last_seq": 3}),
            frame("snapshot", {"seq": 3, "state": {"seq": 3, "status": "succeeded"}}, 3),
            frame("caught_up", {"replayed": 0})),
    )
    async with aclient(script) as c:
        items = [i async for i in c.stream("ses_1", after=10, until_end=True)]
    assert [i.kind for i in items] == ["attached", "resync", "snapshot", "caught_up"]


def test_sync_stream_reconnects_too():
    script = Script(
        sse(frame("attached", {"last_seq": 2, "status": "running"}),
            frame("snapshot", {"seq": 1, "state": {"seq": 1}}, 1), ev(2)),
        sse(frame("attached", {"last_seq": 3, "status": "running"}),
            ev(3, "session_end", status="cancelled")),
    )
    with Client("http://test", "k", transport=httpx.MockTransport(script)) as c:
        items = list(c.stream("ses_1", until_end=True))
    assert isinstance(items[0], AttachedFrame) and isinstance(items[1], SnapshotFrame)
    assert [i.seq for i in items if isinstance(i, EventRecord)] == [2, 3]
    assert script.requests[1].headers["last-event-id"] == "2"


async def test_stream_gives_up_on_a_frame_that_never_parses():
    bad = sse(frame("attached", {"last_seq": 3, "status": "running"}), ev(3),
              "id: 4\nevent: text_delta\ndata: {not json\n\n")
    script = Script(*[bad] * STUCK_LIMIT)
    async with aclient(script) as c:
        items: list[Any] = []
        with pytest.raises(ProtocolError):
            async for item in c.stream("ses_1", after=2):
                items.append(item)
    assert len(script.requests) == STUCK_LIMIT
    assert [i.seq for i in items if isinstance(i, EventRecord)] == [3]
    assert script.requests[-1].headers["last-event-id"] == "3"


async def test_session_view_folds_events_on_the_snapshot():
    from outlive.client import SessionView
    from outlive.domain.reducer import apply, empty_state

    state1 = apply(empty_state(), "user_message", 1, {"text": "hi", "delivery": "start"})
    script = Script(
        sse(frame("attached", {"last_seq": 1, "status": "queued"}),
            frame("snapshot", {"seq": 1, "state": state1}, 1),
            frame("caught_up", {"replayed": 0}),
            ev(2, "session_start", attempt=1),
            ev(3, "turn_start", turn=1, message_id="m1"),
            ev(4, "text_delta", message_id="m1", text="Hel"),
            ev(5, "text_delta", message_id="m1", text="lo")),
        sse(frame("attached", {"last_seq": 6, "status": "succeeded"}),
            ev(6, "session_end", status="succeeded"), frame("caught_up", {"replayed": 1})),
    )
    async with aclient(script) as c:
        view = SessionView(c, "ses_1", until_end=True)
        seqs = [s["seq"] async for s in view]
    assert seqs == [1, 2, 3, 4, 5, 6]
    assert view.status == "succeeded" and view.caught_up
    assert view.state["items"][1]["text"] == "Hello"
    assert script.requests[1].headers["last-event-id"] == "5"


async def test_session_view_refolds_a_snapshot_of_another_reducer_version():
    from outlive.client import SessionView

    events = [{"seq": 1, "ts": TS, "type": "user_message", "attempt": 0, "fence": 0,
               "data": {"text": "hi", "delivery": "start"}},
              {"seq": 2, "ts": TS, "type": "title", "attempt": 0, "fence": 0,
               "data": {"title": "T"}}]
    script = Script(
        sse(frame("attached", {"last_seq": 2, "status": "queued"}),
            frame("snapshot", {"seq": 2, "state": {"version": 999, "seq": 2}}, 2),
            frame("caught_up", {"replayed": 0})),
        httpx.Response(200, json={"events": events, "last_seq": 2}),
    )
    async with aclient(script) as c:
        view = SessionView(c, "ses_1")
        async for _ in view:
            break
    assert view.state["version"] != 999 and view.state["title"] == "T" and view.seq == 2
    assert script.requests[1].headers["accept"] == "application/json"
