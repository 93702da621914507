"""What a `POST /responses` body may say, and how it becomes one user message of a session.

The body is OpenAI's: unknown fields are accepted and ignored (the SDKs send what the caller
set, and a drop-in backend must not choke on `temperature`), but a field outlive cannot honour
is refused with a 400 naming it, never silently dropped: client-side `tools`, a forced
`tool_choice`, structured `text.format`, `conversation`, `prompt` templates, input other than
text, and (until approvals exist) `mcp_approval_response` items.

`model` names an outlive agent (`demo`) or a model route (`demo:scripted`, run by the default
agent). `instructions` and system/developer messages are put before the input text in the one
user message the agent receives: an outlive agent keeps its own system prompt.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from ...domain.errors import UnknownRoute
from ...domain.model import Session
from .._catalog import AgentCatalog
from ._errors import OpenAIError, bad_request

__all__ = ["CreateResponse", "display_model", "input_text", "resolve_model"]

MAX_METADATA_PAIRS = 16


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

    def check_supported(self) -> None:
        """Refuse what outlive cannot do, before anything is stored."""
        if self.tools:
            raise bad_request(
                "Client-side tools are not supported: outlive agents run their own tools "
                "(they appear as mcp_call items). Leave 'tools' empty.", "tools",
                "unsupported_parameter")
        if self.tool_choice not in (None, "auto"):
            raise bad_request("Only tool_choice 'auto' is supported.", "tool_choice",
                              "unsupported_parameter")
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
        if self.metadata is not None:
            _check_metadata(self.metadata)


def _check_metadata(metadata: Mapping[str, str]) -> None:
    if len(metadata) > MAX_METADATA_PAIRS:
        raise bad_request(f"metadata may hold at most {MAX_METADATA_PAIRS} pairs.", "metadata",
                          "invalid_value")
    for key, value in metadata.items():
        if len(key) > 64 or len(value) > 512:
            raise bad_request("metadata keys are at most 64 characters and values at most 512.",
                              f"metadata.{key[:64]}", "invalid_value")


def input_text(body: CreateResponse) -> str:
    """The text of the user message this request sends."""
    preamble = [body.instructions] if body.instructions else []
    said: list[str] = []
    if isinstance(body.input, str):
        said.append(body.input)
    else:
        for i, item in enumerate(body.input):
            where = f"input[{i}]"
            kind = item.get("type")
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
    if not any(s.strip() for s in said):
        raise bad_request("The input must contain some user text.", "input", "invalid_value")
    return "\n\n".join(p for p in (*preamble, *said) if p)


def _unsupported_item(kind: str, where: str) -> OpenAIError:
    if kind == "mcp_approval_response":
        return bad_request("Tool approvals are not available on this server yet.", where,
                           "unsupported_input")
    if kind == "function_call_output":
        return bad_request("outlive runs its tools itself: there is no client-side function "
                           "call to answer.", where, "unsupported_input")
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
