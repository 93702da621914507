"""What a `POST /responses` body may say, and how it becomes one user message of a session.

The body is OpenAI's: unknown fields are accepted and ignored (the SDKs send what the caller
set, and a drop-in backend must not choke on `temperature`), but a field outlive cannot honour
is refused with a 400 naming it, never silently dropped: hosted `tools` (any type but
`function`), a forced `tool_choice`, structured `text.format`, `conversation`, `prompt`
templates, and input other than text, one `mcp_approval_response` item (which decides an
approval, `_approval`) or `function_call_output` items (the results of the client's own
`function` tools, `_function_calls`, with the `function_call` items they answer sent back).

`truncation` is honoured: `auto` is what outlive does anyway (it compacts the model's view of
a long conversation, docs/context.md); `disabled` is kept in the session's metadata
(`TRUNCATION_KEY`) and the run then never compacts: a request that does not fit the window
fails with `context_length_exceeded`. A conversation keeps the setting its first request
chose; metadata keys under `outlive.` are outlive's own and refused.

`model` names an outlive agent (`demo`) or a model route (`demo:scripted`, run by the default
agent). `instructions` and system/developer messages are put before the input text in the one
user message the agent receives: an outlive agent keeps its own system prompt.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from ...domain.client_tools import ClientTool, parse_client_tools
from ...domain.errors import InvalidInput, UnknownRoute
from ...domain.model import TRUNCATION_KEY, Session
from .._catalog import AgentCatalog
from ._errors import OpenAIError, bad_request
from ._tool_choice import check_tool_choice

__all__ = [
    "ApprovalAnswer",
    "CreateResponse",
    "FunctionOutput",
    "RequestInput",
    "check_same_model",
    "check_same_truncation",
    "display_model",
    "function_tools",
    "read_input",
    "resolve_model",
    "session_metadata",
    "truncation_of",
]

MAX_METADATA_PAIRS = 16
MAX_REASON = 2000
TRUNCATIONS = ("auto", "disabled")
OWN_PREFIX = "outlive."
"""Metadata keys outlive keeps for itself (`TRUNCATION_KEY`): not a client's to set or see."""


class CreateResponse(BaseModel):
    model_config = ConfigDict(extra="allow")

    model: str | None = Field(default=None, description="An outlive agent name or model route.")
    input: str | list[dict[str, Any]] = Field(
        description="Text, or a list of message items (roles user, system, developer).")
    instructions: str | None = None
    previous_response_id: str | None = Field(
        default=None, description="Continue the conversation (session) of this response.")
    background: bool | None = None
    stream: bool | None = None
    metadata: dict[str, str] | None = None
    store: bool | None = None
    tools: list[Any] | None = None
    tool_choice: Any = None
    text: dict[str, Any] | None = None
    conversation: Any = None
    prompt: Any = None
    truncation: str | None = Field(
        default=None, description="'auto' (outlive compacts a long conversation's context) "
        "or 'disabled' (a request that does not fit the model's window fails instead).")

    def check_supported(self) -> None:
        """Refuse what outlive cannot do, before anything is stored."""
        for i, t in enumerate(self.tools or []):
            kind = t.get("type") if isinstance(t, Mapping) else None
            if kind != "function":
                raise bad_request(
                    f"Tools of type {kind!r} are not supported: outlive agents run their own "
                    "tools (they appear as mcp_call items); a client may add tools of type "
                    "'function', which it runs itself.", f"tools[{i}].type",
                    "unsupported_parameter")
        check_tool_choice(self.tool_choice)
        fmt = (self.text or {}).get("format")
        if isinstance(fmt, Mapping) and fmt.get("type", "text") != "text":
            raise bad_request("Only plain text output is supported.", "text.format",
                              "unsupported_parameter")
        for name in ("conversation", "prompt"):
            if getattr(self, name) is not None:
                raise bad_request(f"'{name}' is not supported; continue a conversation with "
                                  "previous_response_id.", name, "unsupported_parameter")
        if self.store is False and (self.background or self.previous_response_id):
            raise bad_request(
                "store=false is only supported for a foreground request that starts a "
                "conversation.", "store", "unsupported_parameter")
        if self.truncation is not None and self.truncation not in TRUNCATIONS:
            raise bad_request("truncation must be 'auto' or 'disabled'.", "truncation",
                              "invalid_value")
        if self.metadata is not None:
            _check_metadata(self.metadata)


def _check_metadata(metadata: Mapping[str, str]) -> None:
    if len(metadata) > MAX_METADATA_PAIRS:
        raise bad_request(f"metadata may hold at most {MAX_METADATA_PAIRS} pairs.", "metadata",
                          "invalid_value")
    for key, value in metadata.items():
        if key.startswith(OWN_PREFIX):
            raise bad_request(f"metadata keys starting with '{OWN_PREFIX}' are reserved for "
                              "outlive's own settings.", f"metadata.{key[:64]}",
                              "invalid_value")
        if len(key) > 64 or len(value) > 512:
            raise bad_request("metadata keys are at most 64 characters and values at most 512.",
                              f"metadata.{key[:64]}", "invalid_value")


@dataclass(frozen=True)
class ApprovalAnswer:
    """An `mcp_approval_response` input item: a person's decision on an approval request."""

    where: str
    approval_id: str
    approve: bool
    reason: str | None


@dataclass(frozen=True)
class FunctionOutput:
    """A `function_call_output` input item: the client's result of a `function_call`."""

    where: str
    call_id: str
    output: Any


@dataclass(frozen=True)
class RequestInput:
    text: str | None
    """The user message this request sends; None only beside an approval answer or
    function call outputs."""
    answer: ApprovalAnswer | None = None
    outputs: tuple[FunctionOutput, ...] = ()
    echoed: frozenset[str] = frozenset()
    """Call ids of `function_call` items sent back (the previous response's own output)."""


def function_tools(body: CreateResponse) -> tuple[ClientTool, ...]:
    """The request's `function` tools as the session's client tools (docs/client-tools.md);
    none with `tool_choice: "none"`."""
    if body.tool_choice == "none" or not body.tools:
        return ()
    declared = [{k: t[k] for k in ("name", "description", "parameters", "strict") if k in t}
                for t in body.tools]
    try:
        return parse_client_tools(declared)
    except InvalidInput as exc:
        raise bad_request(exc.message, "tools", "invalid_value") from None


def read_input(body: CreateResponse) -> RequestInput:
    """The user message this request sends, and the approval it decides, if it does.
    Instructions and system/developer text go before the user text; with no user text (an
    approval answer alone) there is no message, and they are not sent."""
    preamble = [body.instructions] if body.instructions else []
    said: list[str] = []
    answer: ApprovalAnswer | None = None
    outputs: list[FunctionOutput] = []
    echoed: set[str] = set()
    if isinstance(body.input, str):
        said.append(body.input)
    else:
        for i, item in enumerate(body.input):
            where = f"input[{i}]"
            kind = item.get("type")
            if kind == "mcp_approval_response":
                if answer is not None:
                    raise bad_request("Only one mcp_approval_response per request: a run waits "
                                      "for one approval at a time.", where, "unsupported_input")
                answer = _approval_answer(item, where)
                continue
            if kind == "function_call_output":
                outputs.append(_function_output(item, where))
                continue
            if kind == "function_call" and isinstance(item.get("call_id"), str):
                echoed.add(item["call_id"])
                continue
            if kind not in (None, "message"):
                raise _unsupported_item(str(kind), where)
            role = item.get("role")
            text = _content_text(item.get("content"), f"{where}.content")
            if role == "user":
                said.append(text)
            elif role in ("system", "developer"):
                preamble.append(text)
            elif role == "assistant":
                raise bad_request(
                    "Assistant messages cannot be sent: outlive keeps the conversation. "
                    "Continue it with previous_response_id.", where, "unsupported_input")
            else:
                raise bad_request(f"Unknown role {role!r}.", f"{where}.role", "invalid_value")
    if answer is not None and outputs:
        raise bad_request("An mcp_approval_response and function_call_output items cannot go "
                          "in one request: a run waits on one of them at a time.", "input",
                          "unsupported_input")
    found = (tuple(outputs), frozenset(echoed))
    if not any(s.strip() for s in said):
        if (answer is not None or outputs) and not said:
            return RequestInput(None, answer, *found)
        raise bad_request("The input must contain some user text.", "input", "invalid_value")
    return RequestInput("\n\n".join(p for p in (*preamble, *said) if p), answer, *found)


def _function_output(item: Mapping[str, Any], where: str) -> FunctionOutput:
    call_id = item.get("call_id")
    if not isinstance(call_id, str) or not call_id:
        raise bad_request("A function_call_output needs call_id: the call_id of the "
                          "function_call it answers.", f"{where}.call_id",
                          "missing_required_parameter")
    output = item.get("output")
    if isinstance(output, list):
        output = _content_text(output, f"{where}.output")
    if not isinstance(output, str):
        raise bad_request("A function_call_output's output must be a string.",
                          f"{where}.output", "invalid_value")
    return FunctionOutput(where, call_id, output)


def _approval_answer(item: Mapping[str, Any], where: str) -> ApprovalAnswer:
    approval_id = item.get("approval_request_id")
    if not isinstance(approval_id, str) or not approval_id:
        raise bad_request("An mcp_approval_response needs approval_request_id: the id of the "
                          "mcp_approval_request it answers.", f"{where}.approval_request_id",
                          "missing_required_parameter")
    approve = item.get("approve")
    if not isinstance(approve, bool):
        raise bad_request("An mcp_approval_response needs approve: true or false.",
                          f"{where}.approve", "missing_required_parameter")
    reason = item.get("reason")
    if reason is not None and not isinstance(reason, str):
        raise bad_request("reason must be a string.", f"{where}.reason", "invalid_value")
    if reason is not None and len(reason) > MAX_REASON:
        raise bad_request(f"reason is longer than {MAX_REASON} characters.", f"{where}.reason",
                          "invalid_value")
    return ApprovalAnswer(where, approval_id, approve, reason or None)


def _unsupported_item(kind: str, where: str) -> OpenAIError:
    return bad_request(f"Input items of type {kind!r} are not supported.", where,
                       "unsupported_input")


def _content_text(content: Any, where: str) -> str:
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise bad_request("Message content must be a string or a list of parts.", where,
                          "invalid_value")
    texts = []
    for i, part in enumerate(content):
        kind = part.get("type") if isinstance(part, Mapping) else None
        if kind not in ("input_text", "output_text") or not isinstance(part.get("text"), str):
            raise bad_request(f"Only text parts are supported (got {kind!r}).",
                              f"{where}[{i}]", "unsupported_input")
        texts.append(part["text"])
    return "\n".join(texts)


def resolve_model(catalog: AgentCatalog, model: str | None) -> tuple[str, str]:
    """`model` as (agent, model route): an agent with its own route, or a route run by the
    default agent; no model at all means the default agent."""
    agents = {a.name: a for a in catalog.agents()}
    name = model or catalog.default_agent
    agent = agents.get(name)
    if agent is not None:
        return agent.name, catalog.check_model(agent.model)
    known = ", ".join(sorted(agents)) or "(none)"
    try:
        route = catalog.check_model(name)
    except UnknownRoute as exc:
        raise bad_request(
            f"The model '{name}' does not exist here. Name an outlive agent ({known}) or a "
            f"model route: {exc.message}", "model", "model_not_found") from None
    default = agents.get(catalog.default_agent)
    if default is None:
        raise bad_request(f"The model '{name}' needs the default agent, which is not "
                          f"configured; name an agent ({known}).", "model", "model_not_found")
    return default.name, route


def check_same_model(catalog: AgentCatalog, model: str | None, session: Session) -> None:
    """A follow-up may repeat the conversation's model, not change it."""
    if model and model != display_model(catalog, session):
        if resolve_model(catalog, model) != (session.agent, session.model):
            raise bad_request(
                f"This conversation runs '{display_model(catalog, session)}'; a follow-up "
                "cannot change the model.", "model", "model_mismatch")


def session_metadata(body: CreateResponse) -> dict[str, str] | None:
    """The metadata a new conversation's session keeps: the client's, and `disabled`
    truncation under `TRUNCATION_KEY` (`auto` is the default, so it is not stored)."""
    if body.truncation != "disabled":
        return body.metadata
    return {**(body.metadata or {}), TRUNCATION_KEY: "disabled"}


def truncation_of(session: Session) -> str:
    """The conversation's `truncation`, as its Responses show it."""
    return "disabled" if (session.metadata or {}).get(TRUNCATION_KEY) == "disabled" else "auto"


def check_same_truncation(truncation: str | None, session: Session) -> None:
    """A follow-up may repeat the conversation's truncation, not change it."""
    if truncation is not None and truncation != truncation_of(session):
        raise bad_request(
            f"This conversation's truncation is '{truncation_of(session)}'; a follow-up "
            "cannot change it.", "truncation", "invalid_value")


def display_model(catalog: AgentCatalog, session: Session) -> str:
    """The `model` a Response shows: the agent, or the route when it is not the agent's own."""
    for agent in catalog.agents():
        if agent.name == session.agent:
            try:
                own = catalog.check_model(agent.model)
            except UnknownRoute:
                own = agent.model
            return session.agent if own == session.model else session.model
    return session.model
