"""The `anthropic:` provider: streaming messages through the official `anthropic` SDK.

Raw stream events (`messages.create(stream=True)`) are folded into our events: text deltas,
thinking deltas (extended thinking, enabled with `settings.extra["anthropic_params"] =
{"thinking": {"type": "enabled", "budget_tokens": N}}`), complete `tool_use` calls once their
`input_json_delta` fragments are assembled, and a finish with usage. The SDK is an optional
extra (`pip install 'outlive[anthropic]'`) imported on first use; its own retries are off
(`max_retries=0`) because the runtime retries.

With extended thinking *and* tools, Anthropic wants the signed `thinking` (and any
`redacted_thinking`) blocks of the previous assistant turn back, unchanged: each finished one
is yielded as a `ReasoningBlock`, kept in the assistant entry, and sent first in that
assistant message of the next request.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from ._port import (
    ContextOverflow,
    Finish,
    Message,
    ModelSettings,
    PermanentProviderError,
    ProviderError,
    ProviderEvent,
    ReasoningBlock,
    StopReason,
    TextDelta,
    ThinkingDelta,
    ToolCall,
    ToolCallEvent,
    ToolSpec,
    TransientProviderError,
    Usage,
    provider_error_for_status,
)
from .openai import (
    SdkClients,
    apply_overrides,
    error_message,
    parse_arguments,
    split_params,
    transport_error,
)

__all__ = ["DEFAULT_MAX_TOKENS", "AnthropicProvider", "to_anthropic_messages"]

DEFAULT_MAX_TOKENS = 4096
"""Anthropic requires `max_tokens`; used when the agent sets none."""

_STOP: dict[str, StopReason] = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "tool_use": "tool_calls",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "pause_turn": "stop",
    "refusal": "stop",
}

_CORE = frozenset(("model", "messages", "max_tokens", "stream", "system", "tools"))
"""Passed as SDK keywords; the rest (temperature, thinking, …) goes in `extra_body`, since SDK
versions differ in which parameters their signature names."""


def _split(params: dict[str, Any]) -> dict[str, Any]:
    return split_params(params, _CORE)


_TRANSIENT_TYPES = frozenset({"overloaded_error", "api_error", "rate_limit_error",
                              "timeout_error"})


def to_anthropic_messages(messages: list[Message]) -> tuple[str, list[dict[str, Any]]]:
    """(system prompt, messages) in the Messages API format.

    System messages join into `system`; tool results become `tool_result` blocks in a user
    message; consecutive messages of one role merge into one message, as the API requires
    (all results of parallel calls answer in the single next user message).
    """
    system: list[str] = []
    out: list[dict[str, Any]] = []

    def add(role: str, blocks: list[dict[str, Any]]) -> None:
        if not blocks:
            return
        if out and out[-1]["role"] == role:
            out[-1]["content"].extend(blocks)
        else:
            out.append({"role": role, "content": blocks})

    for m in messages:
        if m.role == "system":
            if m.text:
                system.append(m.text)
        elif m.role == "user":
            add("user", [{"type": "text", "text": m.text}] if m.text.strip() else [])
        elif m.role == "assistant":
            blocks: list[dict[str, Any]] = [
                dict(b) for b in m.reasoning if b.get("type") in _REASONING]
            if m.text.strip():
                blocks.append({"type": "text", "text": m.text})
            blocks.extend(
                {"type": "tool_use", "id": c.call_id, "name": c.name, "input": c.arguments}
                for c in m.tool_calls
            )
            add("assistant", blocks)
        else:
            result: dict[str, Any] = {
                "type": "tool_result",
                "tool_use_id": m.tool_call_id,
                "content": m.text,
            }
            if m.is_error:
                result["is_error"] = True
            add("user", [result])
    for msg in out:  # tool results first within a user message, as the API wants
        if msg["role"] == "user":
            msg["content"].sort(key=lambda b: b["type"] != "tool_result")
    return "\n\n".join(system), out


_REASONING = frozenset({"thinking", "redacted_thinking"})
"""Content blocks the API wants back as they came."""


@dataclass
class _Block:
    type: str
    call_id: str = ""
    name: str = ""
    parts: list[str] = field(default_factory=list)
    input: Any = None
    signature: str = ""
    data: str = ""
    """A `redacted_thinking` block's encrypted content."""

    def reasoning(self) -> dict[str, Any]:
        if self.type == "redacted_thinking":
            return {"type": "redacted_thinking", "data": self.data}
        return {"type": "thinking", "thinking": "".join(self.parts),
                "signature": self.signature}


class AnthropicProvider(SdkClients):
    """Streams Anthropic messages. `name` is the route prefix, used in error messages.

    `settings.extra["anthropic_params"]` (a mapping) adds or overrides request parameters
    (e.g. `thinking`, `top_k`, `metadata`); a value of None removes one.
    """

    sdk_module = "anthropic"

    def _new_client(self, sdk: ModuleType, **options: Any) -> Any:
        return sdk.AsyncAnthropic(**options)

    def request(
        self, messages: list[Message], tools: list[ToolSpec], settings: ModelSettings
    ) -> dict[str, Any]:
        """The keyword arguments of `messages.create` for one call."""
        system, msgs = to_anthropic_messages(messages)
        params: dict[str, Any] = {
            "model": settings.model,
            "messages": msgs,
            "max_tokens": settings.max_tokens or DEFAULT_MAX_TOKENS,
            "stream": True,
        }
        if system:
            params["system"] = system
        if tools:
            params["tools"] = [
                {"name": t.name, "description": t.description, "input_schema": t.parameters}
                for t in tools
            ]
            choice = settings.tool_choice
            if choice is not None and choice.mode != "auto":  # "any" is OpenAI's "required"
                params["tool_choice"] = (
                    {"type": "tool", "name": choice.name} if choice.mode == "tool"
                    else {"type": "any" if choice.mode == "required" else "none"})
        if settings.temperature is not None:
            params["temperature"] = settings.temperature
        apply_overrides(params, settings.extra.get("anthropic_params"))
        params["stream"] = True
        return params

    async def stream(
        self,
        messages: list[Message],
        tools: list[ToolSpec],
        settings: ModelSettings,
    ) -> AsyncIterator[ProviderEvent]:
        client = await self._client_for_loop()
        params = self.request(messages, tools, settings)
        try:
            response = await client.messages.create(**_split(params))
        except Exception as exc:
            raise self._error(exc) from None
        blocks: dict[int, _Block] = {}
        stop: str | None = None
        done = False
        calls = 0
        tokens_in = 0
        tokens_out = 0
        cached = 0
        try:
            events = response.__aiter__()
            while True:
                try:
                    event = await events.__anext__()
                except StopAsyncIteration:
                    break
                except Exception as exc:
                    if stop is not None:
                        break  # complete but for message_stop
                    raise self._error(exc) from None
                kind = getattr(event, "type", None)
                if kind == "content_block_delta":
                    delta = event.delta
                    dtype = getattr(delta, "type", None)
                    if dtype == "text_delta" and delta.text:
                        yield TextDelta(delta.text)
                    elif dtype == "thinking_delta" and delta.thinking:
                        block = blocks.get(int(event.index))
                        if block is not None:
                            block.parts.append(delta.thinking)
                        yield ThinkingDelta(delta.thinking)
                    elif dtype == "signature_delta":
                        block = blocks.get(int(event.index))
                        if block is not None:
                            block.signature += str(getattr(delta, "signature", "") or "")
                    elif dtype == "input_json_delta":
                        block = blocks.get(int(event.index))
                        if block is not None and delta.partial_json:
                            block.parts.append(delta.partial_json)
                elif kind == "content_block_start":
                    cb = event.content_block
                    btype = str(getattr(cb, "type", ""))
                    block = blocks[int(event.index)] = _Block(
                        btype,
                        str(getattr(cb, "id", "") or ""),
                        str(getattr(cb, "name", "") or ""),
                        input=getattr(cb, "input", None),
                        signature=str(getattr(cb, "signature", "") or ""),
                        data=str(getattr(cb, "data", "") or ""),
                    )
                    first = getattr(cb, btype, None) if btype in ("text", "thinking") else None
                    if isinstance(first, str) and first:  # usually empty; deltas follow
                        if btype == "thinking":
                            block.parts.append(first)
                        yield TextDelta(first) if btype == "text" else ThinkingDelta(first)
                elif kind == "content_block_stop":
                    block = blocks.pop(int(event.index), None)
                    if block is not None and block.type == "tool_use":
                        calls += 1
                        yield ToolCallEvent(self._call(block))
                    elif block is not None and block.type in _REASONING:
                        yield ReasoningBlock(block.reasoning())
                elif kind == "message_start":
                    u = getattr(event.message, "usage", None)
                    tokens_in = _input_tokens(u, tokens_in)
                    cached = int(getattr(u, "cache_read_input_tokens", 0) or 0) or cached
                    tokens_out = int(getattr(u, "output_tokens", 0) or 0)
                elif kind == "message_delta":
                    reason = getattr(event.delta, "stop_reason", None)
                    if reason:
                        stop = str(reason)
                    u = getattr(event, "usage", None)
                    tokens_in = _input_tokens(u, tokens_in)
                    cached = int(getattr(u, "cache_read_input_tokens", 0) or 0) or cached
                    tokens_out = int(getattr(u, "output_tokens", None) or tokens_out)
                elif kind == "message_stop":
                    done = True
        finally:
            await response.close()
        if stop is None and not done:
            raise TransientProviderError(
                f"{self.name}: the stream ended before the model finished its answer"
            )
        if stop == "model_context_window_exceeded":
            # The answer ran into the end of the window: what it holds is input + output.
            raise ContextOverflow(
                f"{self.name}: the answer reached the end of the model's context window "
                f"({tokens_in} tokens in, {tokens_out} out)",
                window=tokens_in + tokens_out or None, requested=tokens_in or None)
        reason_: StopReason = _STOP.get(stop or "end_turn", "stop")
        if calls and reason_ == "stop":
            reason_ = "tool_calls"
        yield Finish(reason_, Usage(tokens_in, tokens_out, cached_input_tokens=cached))

    def _call(self, block: _Block) -> ToolCall:
        raw = "".join(block.parts)
        if raw.strip():
            arguments = parse_arguments(self.name, block.name, raw)
        elif isinstance(block.input, dict):
            arguments = dict(block.input)
        else:
            arguments = {}
        if not block.call_id or not block.name:
            raise TransientProviderError(f"{self.name}: the model sent an incomplete tool call")
        return ToolCall(block.call_id, block.name, arguments)

    def _error(self, exc: Exception) -> Exception:
        """An SDK or transport failure as a ProviderError; anything else unchanged."""
        if isinstance(exc, ProviderError):
            return exc
        sdk = self._sdk
        if sdk is not None:
            if isinstance(exc, sdk.APIStatusError):
                status = int(exc.status_code)
                body = exc.body
                message = error_message(body, f"HTTP {status}")
                if status < 400:  # an `error` event inside a 200 stream
                    etype = _error_type(body)
                    text = f"{self.name} error ({etype or 'stream error'}): {message}"
                    if etype in _TRANSIENT_TYPES:
                        return TransientProviderError(text, status=529 if etype ==
                                                      "overloaded_error" else 500)
                    return PermanentProviderError(text)
                return provider_error_for_status(status, f"{self.name} error {status}: {message}")
            if isinstance(exc, sdk.APIConnectionError):
                cause = exc.__cause__
                detail = str(cause) if cause is not None and str(cause) else exc.message
                return TransientProviderError(f"{self.name}: connection failed: {detail}")
        transient = transport_error(self.name, exc)
        if transient is not None:
            return transient
        if sdk is not None and isinstance(exc, sdk.AnthropicError):
            return PermanentProviderError(f"{self.name}: {exc}")
        return exc


def _input_tokens(usage: Any, current: int) -> int:
    """Input tokens including prompt-cache reads and writes, when the usage names them."""
    if usage is None:
        return current
    base = getattr(usage, "input_tokens", None)
    if base is None:
        return current
    cached = sum(
        int(getattr(usage, k, 0) or 0)
        for k in ("cache_creation_input_tokens", "cache_read_input_tokens")
    )
    total = int(base) + cached
    return total if total > 0 else current


def _error_type(body: object) -> str | None:
    if isinstance(body, Mapping):
        inner = body.get("error", body)
        if isinstance(inner, Mapping) and isinstance(inner.get("type"), str):
            return str(inner["type"])
    return None
