"""The `openai:` provider: streaming chat completions through the official `openai` SDK.

Any OpenAI-compatible server works (vLLM, Ollama, llama.cpp server, LM Studio, proxies): give
it a `base_url`. The SDK is an optional extra (`pip install 'outlive[openai]'`) imported on
first use, so the base install never loads it.

The SDK's own retries are off (`max_retries=0`): the runtime retries transient failures with
backoff and records each attempt as an event, and retrying in two places would multiply the
waits. Every SDK or transport failure leaves `stream` as a `ProviderError`; the message is
the provider's own (`error.message` of the response body), never a traceback.
"""

from __future__ import annotations

import abc
import asyncio
import importlib
import json
import uuid
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from .. import tracing
from ._port import (
    Finish,
    Message,
    ModelSettings,
    PermanentProviderError,
    ProviderError,
    ProviderEvent,
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

__all__ = [
    "DEFAULT_TIMEOUT",
    "OpenAIProvider",
    "SdkClients",
    "apply_overrides",
    "error_message",
    "import_sdk",
    "parse_arguments",
    "split_params",
    "to_chat_messages",
    "to_chat_tools",
    "transport_error",
]

DEFAULT_TIMEOUT = 600.0
"""Seconds a request may wait for its next bytes (connecting gets 10 s); a timeout is a
transient error, so the runtime retries it."""

CONNECT_TIMEOUT = 10.0

_TRANSPORT_MODULES = ("httpx", "httpcore", "httpx2", "httpcore2", "h11", "h2", "anyio", "ssl")


def import_sdk(module: str, extra: str) -> ModuleType:
    """Import an optional SDK, or fail with the install command."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise PermanentProviderError(
            f"the {module} SDK is not installed: pip install 'outlive[{extra}]' ({exc})"
        ) from None


_CORE = frozenset(("model", "messages", "stream", "stream_options", "tools"))
"""Passed as SDK keywords; everything else goes in `extra_body`, so parameters that an SDK
version renamed or dropped from its signature still reach the server unchanged."""


def split_params(params: dict[str, Any], core: frozenset[str]) -> dict[str, Any]:
    """SDK keyword arguments: `core` names as keywords, the rest in `extra_body`."""
    kwargs = {k: v for k, v in params.items() if k in core}
    extra = {k: v for k, v in params.items() if k not in core}
    if extra:
        kwargs["extra_body"] = extra
    return kwargs


def error_message(body: object, fallback: str) -> str:
    """The provider's own words from an error body: `{"error": {"message": ...}}` (OpenAI and
    Anthropic), `{"error": "..."}` or `{"message": ...}` (compatible servers), or plain text."""
    if isinstance(body, Mapping):
        inner = body.get("error", body)
        if isinstance(inner, Mapping):
            msg = inner.get("message")
            if isinstance(msg, str) and msg.strip():
                return msg.strip()
        elif isinstance(inner, str) and inner.strip():
            return inner.strip()
        for key in ("message", "detail"):
            msg = body.get(key)
            if isinstance(msg, str) and msg.strip():
                return msg.strip()
    if isinstance(body, str) and body.strip():
        text = " ".join(body.split())
        return text if len(text) <= 300 else text[:297] + "..."
    return fallback


def transport_error(name: str, exc: BaseException) -> TransientProviderError | None:
    """A dropped connection, a cut stream or a timeout below the SDK: worth a retry."""
    module = type(exc).__module__.split(".")[0]
    if isinstance(exc, OSError | asyncio.IncompleteReadError | EOFError | TimeoutError) or (
        module in _TRANSPORT_MODULES
    ):
        detail = str(exc) or type(exc).__name__
        return TransientProviderError(f"{name}: connection failed: {detail}")
    return None


def parse_arguments(name: str, tool: str, raw: str) -> dict[str, Any]:
    """Tool-call arguments assembled from the stream; `""` means no arguments."""
    if not raw.strip():
        return {}
    try:
        value = json.loads(raw)
    except json.JSONDecodeError:
        value = None
    if not isinstance(value, dict):
        # A sampling accident: another attempt will most likely produce valid JSON.
        raise TransientProviderError(
            f"{name}: the model sent malformed arguments for tool {tool!r}: {raw[:200]!r}"
        )
    return value


def to_chat_messages(messages: list[Message]) -> list[dict[str, Any]]:
    """Our messages in the chat-completions format."""
    out: list[dict[str, Any]] = []
    for m in messages:
        if m.role == "assistant":
            item: dict[str, Any] = {"role": "assistant", "content": m.text}
            if m.tool_calls:
                item["content"] = m.text or None
                item["tool_calls"] = [
                    {
                        "id": c.call_id,
                        "type": "function",
                        "function": {
                            "name": c.name,
                            "arguments": json.dumps(c.arguments, ensure_ascii=False),
                        },
                    }
                    for c in m.tool_calls
                ]
            out.append(item)
        elif m.role == "tool":
            out.append({"role": "tool", "tool_call_id": m.tool_call_id, "content": m.text})
        else:
            out.append({"role": m.role, "content": m.text})
    return out


def to_chat_tools(tools: list[ToolSpec]) -> list[dict[str, Any]]:
    return [
        {
            "type": "function",
            "function": {
                "name": t.name,
                "description": t.description,
                "parameters": t.parameters,
                **({"strict": True} if t.strict else {}),
            },
        }
        for t in tools
    ]


_STOP: dict[str, StopReason] = {
    "stop": "stop",
    "tool_calls": "tool_calls",
    "function_call": "tool_calls",
    "length": "length",
    "content_filter": "stop",
}


@dataclass
class _PartialCall:
    call_id: str = ""
    name: str = ""
    parts: list[str] = field(default_factory=list)


def apply_overrides(params: dict[str, Any], overrides: object) -> None:
    """An agent's `<provider>_params`: each key adds or replaces a request parameter, and a
    None value removes one (for servers that reject it)."""
    if isinstance(overrides, Mapping):
        for key, value in overrides.items():
            if value is None:
                params.pop(str(key), None)
            else:
                params[str(key)] = value


class SdkClients(abc.ABC):
    """One SDK client per event loop, created on first use: a registry shares a provider
    between sessions, and an HTTP connection pool cannot outlive its loop. The SDK is imported
    only then, so its extra is needed only when its route is used."""

    sdk_module = ""

    def __init__(
        self,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        timeout: float | None = None,
        name: str | None = None,
    ) -> None:
        self.name = name or self.sdk_module
        self.base_url = base_url
        self.timeout = timeout or DEFAULT_TIMEOUT
        self._api_key = api_key
        self._sdk: ModuleType | None = None
        self._client: Any = None
        self._loop: asyncio.AbstractEventLoop | None = None

    @abc.abstractmethod
    def _new_client(self, sdk: ModuleType, **options: Any) -> Any:
        """The SDK's async client class, called with the shared options."""

    async def _client_for_loop(self) -> Any:
        loop = asyncio.get_running_loop()
        if self._client is None or self._loop is not loop:
            if self._sdk is None:
                # The SDK's first import takes a second or more (pydantic models, httpx):
                # in a thread, so the other sessions on this loop keep streaming meanwhile.
                self._sdk = await asyncio.to_thread(import_sdk, self.sdk_module,
                                                    self.sdk_module)
            sdk = self._sdk
            if self._client is not None and self._loop is loop:
                return self._client  # another call made it while this one imported
            self._client = self._new_client(
                sdk,
                api_key=self._api_key,
                base_url=self.base_url,
                max_retries=0,  # the runtime retries, with backoff and visible events
                timeout=sdk.Timeout(self.timeout, connect=CONNECT_TIMEOUT),
            )
            self._loop = loop
        return self._client

    async def aclose(self) -> None:
        """Close the SDK client's connection pool (call on the loop that used it)."""
        client, self._client, self._loop = self._client, None, None
        if client is not None:
            await client.close()


class OpenAIProvider(SdkClients):
    """Streams chat completions from OpenAI or any OpenAI-compatible server.

    `name` is the route prefix, used in error messages. `settings.extra["openai_params"]`
    (a mapping) adds or overrides request parameters; a value of None removes one (e.g.
    `{"stream_options": None}` for a server that rejects it).

    One SDK client per event loop, created on first use: the registry shares a provider
    between sessions, and an HTTP connection pool cannot outlive its loop.
    """

    sdk_module = "openai"

    def _new_client(self, sdk: ModuleType, **options: Any) -> Any:
        return sdk.AsyncOpenAI(**options)

    def request(
        self, messages: list[Message], tools: list[ToolSpec], settings: ModelSettings
    ) -> dict[str, Any]:
        """The keyword arguments of `chat.completions.create` for one call."""
        params: dict[str, Any] = {
            "model": settings.model,
            "messages": to_chat_messages(messages),
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if tools:
            params["tools"] = to_chat_tools(tools)
            choice = settings.tool_choice
            if choice is not None and choice.mode != "auto":
                params["tool_choice"] = (
                    {"type": "function", "function": {"name": choice.name}}
                    if choice.mode == "tool" else choice.mode)
        if settings.max_tokens is not None:
            params["max_tokens"] = settings.max_tokens
        if settings.temperature is not None:
            params["temperature"] = settings.temperature
        apply_overrides(params, settings.extra.get("openai_params"))
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
        kwargs = split_params(params, _CORE)
        traceparent = tracing.current_traceparent()  # of the `chat` span; None when off
        if traceparent is not None:
            kwargs["extra_headers"] = {"traceparent": traceparent}
        try:
            response = await client.chat.completions.create(**kwargs)
        except Exception as exc:
            raise self._error(exc) from None
        calls: dict[int, _PartialCall] = {}
        finish: str | None = None
        usage: Usage | None = None
        emitted = False
        try:
            chunks = response.__aiter__()
            while True:
                try:
                    chunk = await chunks.__anext__()
                except StopAsyncIteration:
                    break
                except Exception as exc:
                    if finish is not None:
                        break  # the answer was complete; only the usage chunk is lost
                    raise self._error(exc) from None
                got = getattr(chunk, "usage", None)
                if got is not None:
                    usage = _usage(got)
                for choice in getattr(chunk, "choices", None) or []:
                    if (getattr(choice, "index", 0) or 0) != 0:
                        continue
                    delta = getattr(choice, "delta", None)
                    if delta is not None:
                        thinking = getattr(delta, "reasoning_content", None) or getattr(
                            delta, "reasoning", None
                        )
                        if isinstance(thinking, str) and thinking:
                            yield ThinkingDelta(thinking)
                        content = getattr(delta, "content", None)
                        if isinstance(content, str) and content:
                            yield TextDelta(content)
                        for tc in getattr(delta, "tool_calls", None) or []:
                            self._add_fragment(calls, tc)
                    reason = getattr(choice, "finish_reason", None)
                    if reason and finish is None:
                        finish = str(reason)
                        if finish != "length" and not emitted:
                            emitted = True
                            for call in self._complete(calls):
                                yield ToolCallEvent(call)
        finally:
            await response.close()
        if finish is None:
            raise TransientProviderError(
                f"{self.name}: the stream ended before the model finished its answer"
            )
        if finish == "length":
            yield Finish("length", usage)
            return
        stop = "tool_calls" if calls else _STOP.get(finish, "stop")
        yield Finish(stop, usage)

    @staticmethod
    def _add_fragment(calls: dict[int, _PartialCall], tc: Any) -> None:
        index = getattr(tc, "index", None)
        call_id = getattr(tc, "id", None)
        if index is None:  # some compatible servers leave it out: match by id, else append
            index = next(
                (i for i, c in calls.items() if call_id and c.call_id == call_id), len(calls)
            )
        part = calls.setdefault(int(index), _PartialCall())
        if call_id:
            part.call_id = str(call_id)
        fn = getattr(tc, "function", None)
        if fn is not None:
            name = getattr(fn, "name", None)
            if name:
                part.name = str(name)
            args = getattr(fn, "arguments", None)
            if args:
                part.parts.append(str(args))

    def _complete(self, calls: dict[int, _PartialCall]) -> list[ToolCall]:
        out = []
        for _, part in sorted(calls.items()):
            if not part.name:
                raise TransientProviderError(
                    f"{self.name}: the model sent a tool call without a name"
                )
            out.append(
                ToolCall(
                    part.call_id or f"call_{uuid.uuid4().hex[:24]}",
                    part.name,
                    parse_arguments(self.name, part.name, "".join(part.parts)),
                )
            )
        return out

    def _error(self, exc: Exception) -> Exception:
        """An SDK or transport failure as a ProviderError; anything else unchanged."""
        if isinstance(exc, ProviderError):
            return exc
        sdk = self._sdk
        if sdk is not None:
            if isinstance(exc, sdk.APIStatusError):
                status = int(exc.status_code)
                message = error_message(exc.body, f"HTTP {status}")
                return provider_error_for_status(status, f"{self.name} error {status}: {message}")
            if isinstance(exc, sdk.APIConnectionError):
                cause = exc.__cause__
                detail = str(cause) if cause is not None and str(cause) else exc.message
                return TransientProviderError(f"{self.name}: connection failed: {detail}")
            if isinstance(exc, sdk.APIError):  # an error event inside a 200 stream
                message = error_message(exc.body, str(exc.message))
                return TransientProviderError(f"{self.name} stream error: {message}")
        transient = transport_error(self.name, exc)
        if transient is not None:
            return transient
        if sdk is not None and isinstance(exc, sdk.OpenAIError):
            return PermanentProviderError(f"{self.name}: {exc}")
        return exc


def _count(obj: Any, name: str) -> int:
    value = getattr(obj, name, None) if obj is not None else None
    if value is None and isinstance(obj, dict):
        value = obj.get(name)
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0


def _usage(got: Any) -> Usage:
    """The usage chunk's counts; the cached and reasoning details when the server sends them
    (`prompt_tokens_details.cached_tokens`, `completion_tokens_details.reasoning_tokens`)."""
    prompt = getattr(got, "prompt_tokens_details", None)
    completion = getattr(got, "completion_tokens_details", None)
    return Usage(_count(got, "prompt_tokens"), _count(got, "completion_tokens"),
                 cached_input_tokens=_count(prompt, "cached_tokens"),
                 reasoning_tokens=_count(completion, "reasoning_tokens"))
