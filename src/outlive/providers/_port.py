"""The ModelProvider port: the one shape every model adapter (demo, openai, anthropic, local) has.

The runtime only ever sees these types, so adapters can change SDKs without touching the turn
loop, and the demo provider can stand in for a real model in every test.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, TypeAlias, get_args, runtime_checkable

from ..domain.context import parse_overflow
from ..domain.errors import InvalidInput, OutliveError
from ..domain.tool_calls import ToolCall, ToolChoice, ToolSpec

__all__ = [
    "Completion",
    "ContextOverflow",
    "Finish",
    "Message",
    "ModelProvider",
    "ModelSettings",
    "PermanentProviderError",
    "ProviderError",
    "ProviderEvent",
    "ReasoningBlock",
    "Role",
    "StopReason",
    "TextDelta",
    "ThinkingDelta",
    "ToolCall",
    "ToolCallEvent",
    "ToolChoice",
    "ToolSpec",
    "TransientProviderError",
    "Usage",
    "collect",
    "provider_error_for_status",
]

Role: TypeAlias = Literal["system", "user", "assistant", "tool"]
StopReason: TypeAlias = Literal["stop", "tool_calls", "length"]

_ROLES = frozenset(get_args(Role))
_STOP_REASONS = frozenset(get_args(StopReason))


@dataclass(frozen=True)
class Message:
    """One item of model history in provider-neutral form.

    Assistant messages carry the tool calls they asked for; tool messages answer one call by
    `tool_call_id` and say whether the result is an error, so the model never mistakes a
    failure for a success.
    """

    role: Role
    text: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)
    tool_call_id: str | None = None
    is_error: bool = False
    reasoning: list[dict[str, Any]] = field(default_factory=list)
    """Assistant messages: the provider's reasoning blocks to send back (`ReasoningBlock`)."""

    def __post_init__(self) -> None:
        if self.role not in _ROLES:
            raise InvalidInput(f"unknown message role {self.role!r}")
        if self.tool_calls and self.role != "assistant":
            raise InvalidInput("only assistant messages carry tool calls")
        if self.role == "tool" and not self.tool_call_id:
            raise InvalidInput("a tool message must name the tool_call_id it answers")
        if self.role != "tool" and (self.tool_call_id is not None or self.is_error):
            raise InvalidInput("only tool messages carry tool_call_id and is_error")
        if self.reasoning and self.role != "assistant":
            raise InvalidInput("only assistant messages carry reasoning blocks")

    @classmethod
    def system(cls, text: str) -> Message:
        return cls(role="system", text=text)

    @classmethod
    def user(cls, text: str) -> Message:
        return cls(role="user", text=text)

    @classmethod
    def assistant(
        cls, text: str = "", tool_calls: list[ToolCall] | None = None,
        reasoning: list[dict[str, Any]] | None = None,
    ) -> Message:
        return cls(role="assistant", text=text, tool_calls=list(tool_calls or []),
                   reasoning=list(reasoning or []))

    @classmethod
    def tool_result(cls, tool_call_id: str, text: str, *, is_error: bool = False) -> Message:
        return cls(role="tool", text=text, tool_call_id=tool_call_id, is_error=is_error)


@dataclass(frozen=True)
class ModelSettings:
    """Per-call knobs; `extra` passes adapter-specific options through untouched."""

    model: str
    max_tokens: int | None = None
    temperature: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    tool_choice: ToolChoice | None = None
    """What the model must do with the tools on this call (None: it decides)."""


@dataclass(frozen=True)
class Usage:
    """What one call used. `input_tokens` counts every input token, those read from the
    provider's prompt cache too (`cached_input_tokens` of them); `reasoning_tokens` are part
    of `output_tokens`. `estimated`: the counts are not the provider's own (the demo's)."""

    input_tokens: int
    output_tokens: int
    cached_input_tokens: int = 0
    reasoning_tokens: int = 0
    estimated: bool = False


@dataclass(frozen=True)
class TextDelta:
    text: str


@dataclass(frozen=True)
class ThinkingDelta:
    text: str


@dataclass(frozen=True)
class ReasoningBlock:
    """A finished block of the model's reasoning that the provider wants back, unchanged, in
    the next request (Anthropic's signed `thinking` and `redacted_thinking` blocks: without
    them a follow-up with tools after thinking is refused). Opaque to everyone else; kept in
    the assistant entry and handed back as `Message.reasoning`."""

    block: dict[str, Any]


@dataclass(frozen=True)
class ToolCallEvent:
    """Only complete calls are emitted: adapters assemble streamed argument fragments first."""

    call: ToolCall


@dataclass(frozen=True)
class Finish:
    """Always the last event of a successful stream."""

    stop_reason: StopReason
    usage: Usage | None = None

    def __post_init__(self) -> None:
        if self.stop_reason not in _STOP_REASONS:
            raise InvalidInput(f"unknown stop reason {self.stop_reason!r}")


ProviderEvent: TypeAlias = TextDelta | ThinkingDelta | ReasoningBlock | ToolCallEvent | Finish


class ProviderError(OutliveError):
    """A model call failed. `transient` tells the runtime whether retrying can help."""

    code = "PROVIDER_ERROR"
    http_status = 502
    transient = False

    def __init__(self, message: str, *, status: int | None = None, **details: Any) -> None:
        super().__init__(message, status=status, **details)
        self.status = status


class TransientProviderError(ProviderError):
    """Worth retrying with backoff: rate limits (429), server errors (5xx), dropped connections."""

    transient = True


class PermanentProviderError(ProviderError):
    """Retrying cannot help: bad request (400), bad key (401/403), unknown model (404)."""

    transient = False


class ContextOverflow(PermanentProviderError):
    """The provider refused the request as longer than the model's context window; `window`
    and `requested` are the numbers it gave, when it gave them. The run compacts the model's
    view and tries the call once more (docs/context.md)."""

    def __init__(self, message: str, *, status: int | None = None, window: int | None = None,
                 requested: int | None = None) -> None:
        super().__init__(message, status=status)
        self.window = window
        self.requested = requested


def overflow_error(status: int | None, message: str) -> ContextOverflow | None:
    """The `ContextOverflow` an error message describes (OpenAI's, Anthropic's, llama.cpp's
    and the local model's wording), or None."""
    if status is not None and status not in (400, 413, 422):
        return None
    found = parse_overflow(message)
    if found is None:
        return None
    return ContextOverflow(message, status=status, window=found.window,
                           requested=found.requested)


def provider_error_for_status(status: int | None, message: str) -> ProviderError:
    """Classify an HTTP failure so every adapter retries the same things.

    `None` means no response arrived at all (connection dropped or timed out): transient.
    A refusal for length is a `ContextOverflow`.
    """
    overflow = overflow_error(status, message) if status is not None else None
    if overflow is not None:
        return overflow
    if status is None or status in (408, 409, 425, 429) or status >= 500:
        return TransientProviderError(message, status=status)
    return PermanentProviderError(message, status=status)


@runtime_checkable
class ModelProvider(Protocol):
    """A streaming model.

    Contract for adapters:

    * `stream` is an async generator: it yields `TextDelta` / `ThinkingDelta` pieces as they
      arrive, each `ToolCallEvent` once its call is complete, and ends with exactly one
      `Finish` (stop reason "tool_calls" when it asked for tools).
    * Failures raise `ProviderError` subclasses (`TransientProviderError` for 429, 5xx and
      dropped connections; `PermanentProviderError` for 400/401/404), never bare SDK errors.
    * Cancellation: when the task consuming the stream is cancelled, `CancelledError` is raised
      at the generator's current `await`; the adapter must let it propagate and release the
      HTTP request at once (`async with` / `finally`), so cancel-to-abort stays in milliseconds.
      Consumers that stop early should close the generator (`contextlib.aclosing`).
    * A provider instance is shared by many sessions and may be called concurrently; the model
      name comes in `settings.model`.
    """

    def stream(
        self,
        messages: list[Message],
        tools: list[ToolSpec],
        settings: ModelSettings,
    ) -> AsyncIterator[ProviderEvent]: ...


@dataclass(frozen=True)
class Completion:
    """A whole stream folded into one value: convenient for tests, titles and one-shot calls."""

    text: str
    thinking: str
    tool_calls: list[ToolCall]
    stop_reason: StopReason
    usage: Usage | None

    def as_message(self) -> Message:
        return Message.assistant(self.text, self.tool_calls)


async def collect(events: AsyncIterator[ProviderEvent]) -> Completion:
    """Consume a stream to its `Finish`; raises `ProviderError` if it ends without one."""
    text: list[str] = []
    thinking: list[str] = []
    calls: list[ToolCall] = []
    finish: Finish | None = None
    try:
        async for event in events:
            if finish is not None:
                raise PermanentProviderError("provider yielded events after Finish")
            if isinstance(event, TextDelta):
                text.append(event.text)
            elif isinstance(event, ThinkingDelta):
                thinking.append(event.text)
            elif isinstance(event, ToolCallEvent):
                calls.append(event.call)
            elif isinstance(event, ReasoningBlock):
                continue
            else:
                finish = event
    finally:
        aclose = getattr(events, "aclose", None)
        if aclose is not None:
            await aclose()
    if finish is None:
        raise TransientProviderError("provider stream ended without a finish")
    return Completion(
        text="".join(text),
        thinking="".join(thinking),
        tool_calls=calls,
        stop_reason=finish.stop_reason,
        usage=finish.usage,
    )
