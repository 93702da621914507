"""Token-limited model servers that behave like the real APIs, for the acceptance tests of
context compaction: `OpenAIWindowServer` (POST /v1/chat/completions) and
`AnthropicWindowServer` (POST /v1/messages), on real sockets at 127.0.0.1.

Both count a request's tokens with their own tokenizer (`window_core.count_tokens`), refuse
one over their window with the vendor's own 400, refuse a request that separates a tool call
from its result with the vendor's own wording, and otherwise answer with made-up text:

* an answer of about 1,400 characters starting `Answer to «<last user message>».`;
* tool calls first when the last user message holds `[tool:NAME {json args}]` markers,
  then the answer once the results are in;
* a short summary when the system prompt starts `You compress a conversation`.

    server = await OpenAIWindowServer(3000).start()   # base URL: server.base_url
    ...
    assert server.check_pairs() > 0                    # no accepted request split a pair
    await server.close()
"""

from __future__ import annotations

import json
import time
from typing import Any, ClassVar

from .window_core import (
    Call,
    Conversation,
    Exchange,
    Refusal,
    Turn,
    WindowServer,
    check_pairs,
    count_tokens,
    json_tokens,
    pieces,
)
from .window_http import sse

__all__ = [
    "AnthropicWindowServer",
    "Exchange",
    "OpenAIWindowServer",
    "WindowServer",
    "check_pairs",
    "count_tokens",
]


def _text(content: Any) -> str:
    """Text of a content value: a string, or a list of parts/blocks with `text`."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(p.get("text", "")) for p in content
                         if isinstance(p, dict) and p.get("type") == "text")
    return ""


def _object(arguments: str) -> Any:
    """Arguments as the JSON object they should be (`{}` when a marker's were malformed)."""
    try:
        value = json.loads(arguments or "{}")
    except json.JSONDecodeError:
        return {}
    return value if isinstance(value, dict) else {}


def _fragments(text: str, size: int = 8) -> list[str]:
    return [text[i:i + size] for i in range(0, len(text), size)] or [""]


class OpenAIWindowServer(WindowServer):
    """Chat completions with a context window. `max_tokens` (or `max_completion_tokens`)
    counts against the window, as at OpenAI; an answer that reaches the window's end stops
    with finish_reason `length`. Base URL for the SDK: `base_url` (ends in /v1)."""

    vendor = "openai"
    path = "/v1/chat/completions"

    @property
    def base_url(self) -> str:
        return f"{self.url}/v1"

    @staticmethod
    def _error(message: str, param: str | None, code: str | None,
               type_: str = "invalid_request_error") -> dict[str, Any]:
        return {"error": {"message": message, "type": type_, "param": param, "code": code}}

    def conversation(self, body: dict[str, Any]) -> Conversation:
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise Refusal(400, self._error(
                "Invalid 'messages': empty array. Expected an array with minimum length 1, "
                "but got an empty array instead.", "messages", "empty_array"), "invalid")
        system: list[str] = []
        turns: list[Turn] = []
        for m in messages:
            role, text = m.get("role"), _text(m.get("content"))
            if role in ("system", "developer"):
                if not turns:
                    system.append(text)
                else:
                    turns.append(Turn("system", text))
            elif role == "assistant":
                calls = tuple(
                    Call(str(c.get("id")), str(c["function"]["name"]),
                         str(c["function"].get("arguments") or ""))
                    for c in m.get("tool_calls") or [])
                turns.append(Turn("assistant", text, calls))
            elif role == "tool":
                turns.append(Turn("tool", text, answers=str(m.get("tool_call_id"))))
            else:
                turns.append(Turn("user", text))
        return Conversation("\n\n".join(system), turns)

    def pairing(self, body: dict[str, Any]) -> None:
        allowed: set[str] | None = None
        open_: list[str] = []
        asked_at = 0
        for i, m in enumerate(body["messages"]):
            if m.get("role") == "tool":
                cid = m.get("tool_call_id")
                if allowed is None:
                    raise Refusal(400, self._error(
                        "Invalid parameter: messages with role 'tool' must be a response to a "
                        "preceeding message with 'tool_calls'.", f"messages.[{i}].role", None),
                        "pairing")
                if cid not in allowed:
                    raise Refusal(400, self._error(
                        f"Invalid parameter: 'tool_call_id' of '{cid}' not found in "
                        "'tool_calls' of previous message.", f"messages.[{i}].tool_call_id",
                        None), "pairing")
                if cid in open_:
                    open_.remove(cid)
                continue
            self._answered(open_, asked_at)
            calls = m.get("tool_calls") if m.get("role") == "assistant" else None
            allowed = {str(c.get("id")) for c in calls} if calls else None
            open_, asked_at = [str(c.get("id")) for c in calls or []], i
        self._answered(open_, asked_at)

    def _answered(self, open_: list[str], at: int) -> None:
        if open_:
            raise Refusal(400, self._error(
                "An assistant message with 'tool_calls' must be followed by tool messages "
                "responding to each 'tool_call_id'. The following tool_call_ids did not have "
                f"response messages: {', '.join(open_)}", f"messages.[{at}].role", None),
                "pairing")

    def count(self, body: dict[str, Any]) -> tuple[int, int]:
        n = 3  # the reply's priming
        for m in body["messages"]:
            n += 3 + count_tokens(str(m.get("role", ""))) + count_tokens(_text(m.get("content")))
            for c in m.get("tool_calls") or []:
                fn = c.get("function") or {}
                n += 3 + count_tokens(str(fn.get("name", ""))) + count_tokens(
                    str(fn.get("arguments", "")))
        tools = body.get("tools")
        return n, json_tokens(tools) if tools else 0

    def max_tokens(self, body: dict[str, Any]) -> int | None:
        value = body.get("max_completion_tokens") or body.get("max_tokens")
        return int(value) if value else None

    def overflow(self, parts: tuple[int, int], max_tokens: int | None) -> Refusal:
        msgs, fns = parts
        head = f"This model's maximum context length is {self.window} tokens. However, "
        if max_tokens and self.count_max_tokens:
            total = msgs + fns + max_tokens
            if fns:
                tail = (f"you requested {total} tokens ({msgs} in the messages, {fns} in the "
                        f"functions, and {max_tokens} in the completion). Please reduce the "
                        "length of the messages, functions, or completion.")
            else:
                tail = (f"you requested {total} tokens ({msgs} in the messages, {max_tokens} "
                        "in the completion). Please reduce the length of the messages or "
                        "completion.")
        elif fns:
            tail = (f"your messages resulted in {msgs + fns} tokens ({msgs} in the messages, "
                    f"{fns} in the functions). Please reduce the length of the messages or "
                    "functions.")
        else:
            tail = (f"your messages resulted in {msgs} tokens. Please reduce the length of the "
                    "messages.")
        return Refusal(400, self._error(head + tail, "messages", "context_length_exceeded"),
                       "context_length")

    def failure(self, status: int) -> dict[str, Any]:
        if status >= 500:
            return self._error("The server had an error while processing your request. Sorry "
                               "about that!", None, None, "server_error")
        return self._error(f"This server refuses summarization requests (HTTP {status}).",
                           None, None)

    def not_found(self, method: str, path: str) -> dict[str, Any]:
        return self._error(f"Invalid URL ({method} {path})", None, None)

    def new_call_id(self) -> str:
        return f"call_win{self.next_id():06d}"

    _FINISH: ClassVar[dict[str, str]] = {
        "stop": "stop", "tool_calls": "tool_calls", "max_tokens": "length", "window": "length"}

    def _usage(self, x: Exchange) -> dict[str, Any]:
        return {"prompt_tokens": x.tokens, "completion_tokens": x.output_tokens,
                "total_tokens": x.tokens + x.output_tokens,
                "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
                "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0,
                                              "accepted_prediction_tokens": 0,
                                              "rejected_prediction_tokens": 0}}

    def stream_events(self, x: Exchange) -> list[bytes]:
        with_usage = bool((x.body.get("stream_options") or {}).get("include_usage"))
        head = {"id": f"chatcmpl-win{len(self.requests):06d}", "object": "chat.completion.chunk",
                "created": int(time.time()), "model": x.body.get("model"),
                "system_fingerprint": "fp_window"}

        def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
            choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
            return sse({**head, "choices": [choice], **({"usage": None} if with_usage else {})})

        events = [chunk({"role": "assistant", "content": "" if x.reply or not x.calls else None,
                         "refusal": None})]
        if x.reply:
            events += [chunk({"content": p}) for p in pieces(x.reply, self.words_per_chunk)]
        for i, c in enumerate(x.calls):
            events.append(chunk({"tool_calls": [{"index": i, "id": c.id, "type": "function",
                                                 "function": {"name": c.name,
                                                              "arguments": ""}}]}))
            events += [chunk({"tool_calls": [{"index": i, "function": {"arguments": f}}]})
                       for f in _fragments(c.arguments)]
        events.append(chunk({}, self._FINISH[x.finish]))
        if with_usage:
            events.append(sse({**head, "choices": [], "usage": self._usage(x)}))
        return [*events, sse("[DONE]")]

    def message(self, x: Exchange) -> dict[str, Any]:
        msg: dict[str, Any] = {"role": "assistant", "content": x.reply or None,
                               "refusal": None, "annotations": []}
        if x.calls:
            msg["tool_calls"] = [{"id": c.id, "type": "function",
                                  "function": {"name": c.name, "arguments": c.arguments}}
                                 for c in x.calls]
        return {"id": f"chatcmpl-win{len(self.requests):06d}", "object": "chat.completion",
                "created": int(time.time()), "model": x.body.get("model"),
                "choices": [{"index": 0, "message": msg, "logprobs": None,
                             "finish_reason": self._FINISH[x.finish]}],
                "usage": self._usage(x), "system_fingerprint": "fp_window"}


class AnthropicWindowServer(WindowServer):
    """Anthropic Messages with a context window: `prompt is too long` when the input is over
    it. `max_tokens` counts only with `count_max_tokens=True` (then the older models' `input
    length and max_tokens exceed context limit`); otherwise an answer that reaches the
    window's end stops with `model_context_window_exceeded`, as newer models do. Base URL
    for the SDK: `base_url` (the SDK adds /v1)."""

    vendor = "anthropic"
    path = "/v1/messages"
    counts_max_tokens = False

    @property
    def base_url(self) -> str:
        return self.url

    @staticmethod
    def _error(message: str, type_: str = "invalid_request_error") -> dict[str, Any]:
        return {"type": "error", "error": {"type": type_, "message": message},
                "request_id": "req_window"}

    def _invalid(self, message: str) -> Refusal:
        return Refusal(400, self._error(message), "invalid")

    def conversation(self, body: dict[str, Any]) -> Conversation:
        if not body.get("max_tokens"):
            raise self._invalid("max_tokens: Field required")
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise self._invalid("messages: at least one message is required")
        if messages[0].get("role") != "user":
            raise self._invalid('messages: first message must use the "user" role')
        turns: list[Turn] = []
        for i, m in enumerate(messages):
            role, content = m.get("role"), m.get("content")
            if i and messages[i - 1].get("role") == role:
                raise self._invalid('messages: roles must alternate between "user" and '
                                    f'"assistant", but found multiple "{role}" roles in a row')
            blocks = ([{"type": "text", "text": content}] if isinstance(content, str)
                      else content if isinstance(content, list) else [])
            if not blocks and not (role == "assistant" and i == len(messages) - 1):
                raise self._invalid(f"messages.{i}: all messages must have non-empty content "
                                    "except for the optional final assistant message")
            if any(b.get("type") == "text" and not str(b.get("text", "")).strip()
                   for b in blocks):
                raise self._invalid("messages: text content blocks must be non-empty")
            turns += self._turns(role, blocks)
        return Conversation(_text(body.get("system")), turns)

    @staticmethod
    def _turns(role: Any, blocks: list[dict[str, Any]]) -> list[Turn]:
        text = "\n".join(str(b.get("text", "")) for b in blocks if b.get("type") == "text")
        if role == "assistant":
            calls = tuple(Call(str(b.get("id")), str(b.get("name")),
                               json.dumps(b.get("input") or {}))
                          for b in blocks if b.get("type") == "tool_use")
            return [Turn("assistant", text, calls)]
        out = [Turn("tool", _text(b.get("content")), answers=str(b.get("tool_use_id")))
               for b in blocks if b.get("type") == "tool_result"]
        return out + ([Turn("user", text)] if text else [])

    def pairing(self, body: dict[str, Any]) -> None:
        messages = body["messages"]
        asked: set[str] = set()
        for i, m in enumerate(messages):
            blocks = m["content"] if isinstance(m["content"], list) else []
            if m["role"] == "user":
                for j, b in enumerate(blocks):
                    if b.get("type") == "tool_result" and b.get("tool_use_id") not in asked:
                        raise Refusal(400, self._error(
                            f"messages.{i}.content.{j}: unexpected `tool_use_id` found in "
                            f"`tool_result` blocks: {b.get('tool_use_id')}. Each `tool_result` "
                            "block must have a corresponding `tool_use` block in the previous "
                            "message."), "pairing")
                asked = set()
                continue
            ids = [str(b.get("id")) for b in blocks if b.get("type") == "tool_use"]
            nxt = messages[i + 1]["content"] if i + 1 < len(messages) else []
            answered = {b.get("tool_use_id") for b in nxt if isinstance(nxt, list)
                        and b.get("type") == "tool_result"}
            missing = [c for c in ids if c not in answered]
            if missing:
                raise Refusal(400, self._error(
                    f"messages.{i}: `tool_use` ids were found without `tool_result` blocks "
                    f"immediately after: {', '.join(missing)}. Each `tool_use` block must have "
                    "a corresponding `tool_result` block in the next message."), "pairing")
            asked = set(ids)

    def count(self, body: dict[str, Any]) -> tuple[int, int]:
        n = count_tokens(_text(body.get("system")))
        for m in body["messages"]:
            content = m["content"]
            n += 3 + (count_tokens(content) if isinstance(content, str) else 0)
            for b in content if isinstance(content, list) else []:
                if b.get("type") == "text":
                    n += count_tokens(str(b.get("text", "")))
                elif b.get("type") == "tool_use":
                    n += 3 + count_tokens(str(b.get("name"))) + json_tokens(b.get("input"))
                elif b.get("type") == "tool_result":
                    n += 3 + count_tokens(_text(b.get("content")))
        tools = body.get("tools")
        return n, json_tokens(tools) if tools else 0

    def max_tokens(self, body: dict[str, Any]) -> int | None:
        return int(body["max_tokens"])

    def overflow(self, parts: tuple[int, int], max_tokens: int | None) -> Refusal:
        tokens = sum(parts)
        if tokens > self.window:
            message = f"prompt is too long: {tokens} tokens > {self.window} maximum"
        else:
            message = (f"input length and `max_tokens` exceed context limit: {tokens} + "
                       f"{max_tokens} > {self.window}, decrease input length or `max_tokens` "
                       "and try again")
        return Refusal(400, self._error(message), "context_length")

    def failure(self, status: int) -> dict[str, Any]:
        if status == 529:
            return self._error("Overloaded", "overloaded_error")
        if status >= 500:
            return self._error("Internal server error", "api_error")
        return self._error(f"This server refuses summarization requests (HTTP {status}).")

    def not_found(self, method: str, path: str) -> dict[str, Any]:
        return self._error("Not Found", "not_found_error")

    def new_call_id(self) -> str:
        return f"toolu_01Win{self.next_id():06d}"

    def preface(self, calls: list[Call]) -> str:
        return f"Let me use the {calls[0].name} tool."

    _STOP: ClassVar[dict[str, str]] = {
        "stop": "end_turn", "tool_calls": "tool_use", "max_tokens": "max_tokens",
        "window": "model_context_window_exceeded"}

    def _content(self, x: Exchange) -> list[dict[str, Any]]:
        blocks: list[dict[str, Any]] = [{"type": "text", "text": x.reply}] if x.reply else []
        return blocks + [{"type": "tool_use", "id": c.id, "name": c.name,
                          "input": _object(c.arguments)} for c in x.calls]

    def stream_events(self, x: Exchange) -> list[bytes]:
        def event(kind: str, **data: Any) -> bytes:
            return sse({"type": kind, **data}, kind)

        events = [event("message_start", message={
            **self._head(x), "content": [], "stop_reason": None, "stop_sequence": None,
            "usage": {**self._usage(x), "output_tokens": 1}}), event("ping")]
        for i, block in enumerate(self._content(x)):
            if block["type"] == "text":
                events.append(event("content_block_start", index=i,
                                    content_block={"type": "text", "text": ""}))
                events += [event("content_block_delta", index=i,
                                 delta={"type": "text_delta", "text": p})
                           for p in pieces(x.reply, self.words_per_chunk)]
            else:
                events.append(event("content_block_start", index=i, content_block={
                    **block, "input": {}}))
                events += [event("content_block_delta", index=i,
                                 delta={"type": "input_json_delta", "partial_json": f})
                           for f in ["", *_fragments(x.calls[i - bool(x.reply)].arguments)]]
            events.append(event("content_block_stop", index=i))
        return [*events,
                event("message_delta", delta={"stop_reason": self._STOP[x.finish],
                                              "stop_sequence": None},
                      usage={"output_tokens": x.output_tokens}),
                event("message_stop")]

    def _head(self, x: Exchange) -> dict[str, Any]:
        return {"id": f"msg_01Win{len(self.requests):06d}", "type": "message",
                "role": "assistant", "model": x.body.get("model")}

    def _usage(self, x: Exchange) -> dict[str, Any]:
        return {"input_tokens": x.tokens, "cache_creation_input_tokens": 0,
                "cache_read_input_tokens": 0, "output_tokens": x.output_tokens,
                "service_tier": "standard"}

    def message(self, x: Exchange) -> dict[str, Any]:
        return {**self._head(x), "content": self._content(x),
                "stop_reason": self._STOP[x.finish], "stop_sequence": None,
                "usage": self._usage(x)}
