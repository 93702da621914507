"""A front end's conversation (an AI SDK chat, an AG-UI thread) and its runs, as sessions.

A front end names its conversation with an id of its own. An outlive session id (`ses_…`) is
taken as it is; any other id is kept in the session's metadata as `chat_id` when the first
message creates the session, and found there afterwards (`Store.find_chat`), so a page
that made up a random chat id keeps talking to the same session.

A run is named `run_<the session id's ULID>_<seq>`, the seq of the user message that opened it,
so any API process can find it again. The client's own request id (the AI SDK's message id,
AG-UI's `runId`), scoped by the conversation id (`request_key`), goes with that user message as
its `client_request_id`: the same request retried opens no second run, and two conversations
may use the same request ids.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass

from ..domain.client_tools import ClientTool, check_no_clash
from ..domain.errors import NotFound, SessionBusy
from ..domain.model import TERMINAL, Delivery, Session
from ._context import ApiContext
from ._errors import ApiError
from ._scopes import (
    chat_end_user,
    creating_for,
    scoped_request_id,
    sees,
    viewer,
    visible_session,
)

__all__ = ["RunRef", "find_thread", "not_found", "request_key", "run_for_request", "start_run"]

_RUN = re.compile(r"^run_([0-9A-HJKMNP-TV-Z]{26})_([1-9][0-9]{0,17})$")
_SESSION = re.compile(r"^ses_[0-9A-HJKMNP-TV-Z]{26}$")
MAX_CHAT_ID = 200
MAX_REQUEST_KEY = 200
"""The store's limit on a `client_request_id`."""


@dataclass(frozen=True)
class RunRef:
    session_id: str
    start: int
    """Seq of the user message that opened the run."""

    @property
    def id(self) -> str:
        return f"run_{self.session_id.removeprefix('ses_')}_{self.start}"

    @classmethod
    def parse(cls, run_id: str) -> RunRef | None:
        match = _RUN.match(run_id)
        if match is None:
            return None
        return cls(f"ses_{match.group(1)}", int(match.group(2)))


def not_found(what: str) -> ApiError:
    return ApiError(404, "NOT_FOUND", f"{what} not found")


def _check_chat_id(chat_id: str) -> None:
    if not chat_id or len(chat_id) > MAX_CHAT_ID:
        raise ApiError(400, "INVALID_INPUT",
                       f"a chat or thread id is 1 to {MAX_CHAT_ID} characters")


async def find_thread(ctx: ApiContext, owner_id: str, chat_id: str) -> Session | None:
    """The owner's session for `chat_id`; None when no message has created it yet.
    A session id that is missing or foreign is a 404, like everywhere else. A browser
    token finds only the conversations it sees (`_scopes`): another end user's chat id is
    one no message has created yet, for this token's end user."""
    _check_chat_id(chat_id)
    if _SESSION.match(chat_id):
        try:
            return await visible_session(ctx, owner_id, chat_id)
        except NotFound:
            raise not_found(f"session {chat_id}") from None
    found = await ctx.store.find_chat(owner_id, chat_id, end_user=chat_end_user())
    return found if found is not None and sees(viewer(), found) else None


async def start_run(ctx: ApiContext, owner_id: str, chat_id: str, text: str, *,
                    request_id: str | None, agent: str | None = None,
                    traceparent: str | None = None,
                    client_tools: Sequence[ClientTool] | None = None) -> RunRef:
    """Open a run with `text`: create the conversation's session, or send `text` to it.
    `client_tools` (not None) are the client's tools from this run on (docs/client-tools.md;
    a name of one of the agent's own tools is a 400).

    A conversation that is busy (queued or running: a run is under way, or a stop is settling)
    refuses with 409 `SESSION_BUSY`: these protocols stream one run per request and never fold
    two into one."""
    session = await find_thread(ctx, owner_id, chat_id)
    key = request_key(chat_id, request_id) if request_id is not None else None
    if session is not None and key is not None:
        known = await run_for_request(ctx, session, key)
        if known is not None:  # the same request again: the run it opened
            return known
    if session is None:
        name, model = _agent(ctx, agent)
        if client_tools:
            check_no_clash(client_tools, ctx.catalog.tool_names(name))
        metadata = None if _SESSION.match(chat_id) else {"chat_id": chat_id}
        session = await ctx.store.create_session(
            owner_id, agent=name, model=model, prompt=text, metadata=metadata,
            client_request_id=scoped_request_id(key), traceparent=traceparent,
            client_tools=client_tools or None, end_user=creating_for())
        return RunRef(session.id, session.last_input_seq)
    if client_tools:
        check_no_clash(client_tools, ctx.catalog.tool_names(session.agent))
    if session.status not in TERMINAL:  # queued or running: a run is already under way
        raise _busy(session)
    try:
        posted = await ctx.store.post_message(owner_id, session.id, text, mode=Delivery.REJECT,
                                              client_request_id=key, traceparent=traceparent,
                                              client_tools=client_tools)
    except SessionBusy:
        raise _busy(session) from None
    if posted.delivery is not Delivery.START:  # a retried request that steered, once
        raise _busy(session)
    return RunRef(session.id, posted.seq)


def _busy(session: Session) -> ApiError:
    return ApiError(409, "SESSION_BUSY",
                    "a run is in flight in this conversation; stop it or wait for it",
                    session_id=session.id)


def request_key(chat_id: str, request_id: str) -> str:
    """The `client_request_id` of a front end's request: its id within its conversation."""
    key = f"{chat_id}:{request_id}"
    if len(key) <= MAX_REQUEST_KEY:
        return key
    return "sha256:" + hashlib.sha256(key.encode()).hexdigest()


async def run_for_request(ctx: ApiContext, session: Session, key: str) -> RunRef | None:
    """The run the request with this `request_key` opened in the session, if any."""
    _, state = await ctx.snapshots.at(session.id, session.last_seq)
    for item in reversed(state.get("items", [])):
        if (item.get("kind") == "user" and item.get("delivery") == Delivery.START.value
                and item.get("client_request_id") == key):
            return RunRef(session.id, int(item["seq"]))
    return None


def _agent(ctx: ApiContext, wanted: str | None) -> tuple[str, str]:
    agents = {a.name: a for a in ctx.catalog.agents()}
    agent = agents.get(wanted if wanted is not None else ctx.catalog.default_agent)
    if agent is None:
        known = sorted(agents)
        raise ApiError(400, "UNKNOWN_AGENT",
                       f"unknown agent {wanted!r}; known agents: {', '.join(known) or '(none)'}",
                       agent=wanted, known=known)
    return agent.name, ctx.catalog.check_model(agent.model)
