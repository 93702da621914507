"""The `demo:` provider: a deterministic, offline stand-in for a streaming model.

It lets anyone (and every test) see every behaviour of the server without an API key: the
script (see `_demo_script.plan_turn`) is chosen by words in the latest user message, and this
module streams it with realistic pacing.

Trigger words (case-insensitive, in the latest user message):

* anything else   - a short answer after one `lookup` tool call;
* "run long"      - a long answer (~45 s at speed 1: 26 s of text, two 8 s `slow_task` calls);
* "ask me"        - an `ask_user` tool call (the runtime turns it into `user_question`);
* "fail a tool"   - a `flaky` call that fails, then an answer that admits it;
* "count" / "idempotent" - a call of the idempotent `counter` tool;
* "send it"       - a `send_message` call that waits for the person's approval;
* "length"        - some text, then stop reason "length";
* "markdown"      - an answer in Markdown: a heading, lists, a table, code, a quote, a link;
* "delegate"      - two `agent__helper` calls in one answer: the helper sub-agent works on
  each in a child session (about 10 s at speed 1: text, one 3 s `slow_task`, text), and the
  answer quotes both; "delegate and forget" detaches the second (its report comes back as a
  message, which the demo acknowledges). Only an agent with the helper sub-agent offers the
  tool (the server's default demo agent does);
* "think"         - thinking deltas before each turn's text (combines with the above);
* "call <tool> {json}" - a call of the tool named, with those arguments: any tool of the
  agent with `calls=True` (`--demo-calls`), else only the built-in demo agent's own tools
  for an agent with `extra["demo_calls"]` (the built-in demo agent), as it lets every API
  key holder run the tool;
* a summarizer request (`settings.extra["purpose"] == "summary"`, what the runtime sends
  when it compacts a long session's context) - a deterministic summary: the first words of
  each user message, oldest dropped first to stay within `max_tokens` words
  (`_demo_summary`); no tool calls, no simulated failures;
* "provider error N" - the first N calls for that user message raise
  `TransientProviderError` (N defaults to 2; counted per provider instance, keyed by the
  conversation up to that message and `settings.extra["session_id"]` when given), so retries
  can be shown; "permanent provider error" always raises `PermanentProviderError`.
"""

from __future__ import annotations

import asyncio
import functools
import json
import math
import re
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Iterator

from .._ticks import ticker
from ._demo_script import (
    DEMO_WORDS,
    CallScope,
    DemoTurn,
    conversation_digest,
    latest_user_index,
    plan_turn,
)
from ._demo_summary import summarize
from ._port import (
    Finish,
    Message,
    ModelSettings,
    PermanentProviderError,
    ProviderEvent,
    TextDelta,
    ThinkingDelta,
    ToolCallEvent,
    ToolSpec,
    TransientProviderError,
    Usage,
)

__all__ = ["CALLS_EXTRA", "CHARS_PER_SECOND", "DEFAULT_MODEL", "DEMO_WORDS", "DemoProvider",
           "DemoTurn", "pieces", "plan_turn"]

DEFAULT_MODEL = "scripted"

CALLS_EXTRA = "demo_calls"
"""The agent setting (`Agent.extra`, seen as `settings.extra`) that lets `call <tool>` run
the demo agent's own tools without `--demo-calls`: the built-in demo agent sets it (an
agents file that gives it MCP servers does not make those callable)."""

CHARS_PER_SECOND = 120.0
"""Streaming rate at speed 1 (about 30 tokens/s): the long answer streams for about 26 s."""

FIRST_TOKEN_SECONDS = 0.3
"""Time to first token at speed 1."""

TOOL_CALL_SECONDS = 0.15
"""Time to assemble one tool call's arguments at speed 1."""

YIELD_EVERY = 16
"""At speed 0 nothing sleeps, but the loop yields control every this many pieces."""

TICK_SECONDS = 0.005
"""The pacing clock's grid: every demo stream of a process waits on one shared ticker
(`outlive._ticks`), so the pieces of all streams due in the same 5 ms wake together from
one timer instead of a timer each. A piece is never early and at most one tick late, and
the schedule runs from the answer's start, so the pace over an answer is unchanged."""

_MAX_ERROR_KEYS = 1024
_PROVIDER_ERROR = re.compile(r"\b(permanent )?provider error(?:s)?(?:\s+(\d+))?")
_PIECE = re.compile(r"\S+\s*|\s+")
_MAX_PIECE = 10


def pieces(text: str) -> Iterator[str]:
    """Split text into stream pieces of a few characters to a word; they join back exactly."""
    return iter(_split(text))


@functools.lru_cache(maxsize=64)
def _split(text: str) -> tuple[str, ...]:
    """`pieces`, kept for the script's texts: a thousand sessions stream the same answers."""
    out: list[str] = []
    for match in _PIECE.finditer(text):
        piece = match.group(0)
        while len(piece) > _MAX_PIECE:
            out.append(piece[:6])
            piece = piece[6:]
        if piece:
            out.append(piece)
    return tuple(out)


@functools.lru_cache(maxsize=64)
def _deltas(text: str, thinking: bool) -> tuple[TextDelta | ThinkingDelta, ...]:
    """The stream events of a script text, built once: the events are immutable, and a
    thousand sessions stream the same few answers."""
    kind = ThinkingDelta if thinking else TextDelta
    return tuple(kind(piece) for piece in _split(text))


def _words(text: str) -> int:
    """Cached for short texts: every turn counts the whole conversation again, and its texts
    repeat (a long one is counted afresh rather than kept)."""
    return _short_words(text) if len(text) <= 4096 else len(text.split())


@functools.lru_cache(maxsize=512)
def _short_words(text: str) -> int:
    return len(text.split())


class DemoProvider:
    """Streams the demo script. `speed` scales pacing: 1.0 is realistic, 2.0 twice as fast,
    0 instant (no sleeps, though control is still yielded so cancellation gets through).

    `settings.extra["demo_speed"]` overrides the speed for one call. `calls`: whether
    `call <tool> {json}` runs any tool of any agent (`--demo-calls`), not only the demo
    tools of an agent with `extra["demo_calls"]` (the built-in demo agent).
    """

    def __init__(self, speed: float = 1.0, *, calls: bool = False) -> None:
        self.speed = _check_speed(speed)
        self.calls = calls
        self._errors: OrderedDict[str, int] = OrderedDict()

    async def stream(
        self,
        messages: list[Message],
        tools: list[ToolSpec],
        settings: ModelSettings,
    ) -> AsyncIterator[ProviderEvent]:
        speed = _check_speed(float(settings.extra.get("demo_speed", self.speed)))
        pacer = _Pacer(self, speed)
        delay = pacer.wait(FIRST_TOKEN_SECONDS)
        if delay is not None:
            await self._wait(delay)
        summary = settings.extra.get("purpose") == "summary"
        if summary:
            turn = DemoTurn(summarize(messages, settings.max_tokens), "stop")
        else:
            self._simulate_failure(messages, settings)
            turn = plan_turn(messages, tools, calls=self.call_scope(settings),
                             choice=settings.tool_choice)
        thinking = _deltas(turn.thinking, True)
        text = (tuple(TextDelta(p) for p in _split.__wrapped__(turn.text)) if summary
                else _deltas(turn.text, False))  # a summary is streamed once: not cached
        if speed == 0:
            # Nothing to schedule: the same pieces and yields as `_Pacer` at speed 0 (control
            # every `YIELD_EVERY` pieces, and before each tool call), without its calls.
            count = 0
            for part in (thinking, text):
                for event in part:
                    count += 1
                    if count % YIELD_EVERY == 0:
                        await self._wait(0.0)
                    yield event
            for call in turn.tool_calls:
                await self._wait(0.0)
                yield ToolCallEvent(call)
        else:
            for part in (thinking, text):
                for event in part:
                    delay = pacer.piece(event.text)
                    if delay is not None:
                        await self._wait(delay)
                    yield event
            for call in turn.tool_calls:
                delay = pacer.wait(TOOL_CALL_SECONDS)
                if delay is not None:
                    await self._wait(delay)
                yield ToolCallEvent(call)
        yield Finish(turn.stop_reason, self._usage(messages, tools, turn))

    def call_scope(self, settings: ModelSettings) -> CallScope:
        """Which tools `call <tool>` may run for the agent these settings are of."""
        if self.calls:
            return "all"
        return "demo" if settings.extra.get(CALLS_EXTRA) is True else "none"

    def planned_seconds(self, turn: DemoTurn, speed: float | None = None) -> float:
        """How long streaming `turn` takes at `speed` (default: this provider's speed)."""
        s = self.speed if speed is None else speed
        if s == 0:
            return 0.0
        chars = len(turn.thinking) + len(turn.text)
        return (
            FIRST_TOKEN_SECONDS
            + chars / CHARS_PER_SECOND
            + TOOL_CALL_SECONDS * len(turn.tool_calls)
        ) / s

    def _wait(self, delay: float) -> Awaitable[None]:
        """A pacer's wait: sleep `delay` > 0, or yield control at 0."""
        return self._sleep(delay) if delay > 0 else asyncio.sleep(0)

    def _sleep(self, seconds: float) -> Awaitable[None]:
        """The only real wait, on the shared pacing clock (its future, awaited by the stream
        itself: no coroutine per piece); tests override it (and `_now`) to measure pacing
        without sleeping."""
        return ticker(TICK_SECONDS).sleep(seconds)

    def _now(self) -> float:
        return time.monotonic()

    def _simulate_failure(self, messages: list[Message], settings: ModelSettings) -> None:
        idx = latest_user_index(messages)
        if idx is None:
            return
        match = _failure_asked(messages[idx].text)
        if match is None:
            return
        if match.group(1):
            raise PermanentProviderError(
                "demo: simulated permanent provider error (400 bad request)", status=400
            )
        limit = int(match.group(2)) if match.group(2) else 2
        key = f"{settings.extra.get('session_id', '')}:{conversation_digest(messages[: idx + 1])}"
        seen = self._errors.get(key, 0)
        if seen >= limit:
            return
        self._errors[key] = seen + 1
        self._errors.move_to_end(key)
        while len(self._errors) > _MAX_ERROR_KEYS:
            self._errors.popitem(last=False)
        raise TransientProviderError(
            f"demo: simulated provider error {seen + 1} of {limit} (503 service unavailable)",
            status=503,
        )

    @staticmethod
    def _usage(messages: list[Message], tools: list[ToolSpec], turn: DemoTurn) -> Usage:
        """Token counts as word counts (so marked estimated): crude, deterministic and good
        enough for a demo. The input counts all the model is sent, the tool schemas too, as
        a real provider's does, so a window configured for the demo route (in words) is
        measured honestly."""
        seen = sum(_schema_words(t) for t in tools)
        for m in messages:
            seen += _words(m.text)
            if m.tool_calls:
                seen += sum(_words(json.dumps(c.arguments)) + 1 for c in m.tool_calls)
        out = _words(turn.thinking) + _words(turn.text)
        out += sum(_words(json.dumps(c.arguments)) + 1 for c in turn.tool_calls)
        return Usage(input_tokens=seen, output_tokens=out, estimated=True)


def _schema_words(tool: ToolSpec) -> int:
    """Counted once per spec: every call of every turn sends the same tools again."""
    key = (tool.name, tool.description)
    seen = _SCHEMA_WORDS.get(key)
    if seen is None or seen[0] is not tool.parameters:
        if len(_SCHEMA_WORDS) >= 1024:
            _SCHEMA_WORDS.clear()
        text = f"{tool.name} {tool.description} {json.dumps(tool.parameters)}"
        seen = _SCHEMA_WORDS[key] = (tool.parameters, _words(text))
    return seen[1]


_SCHEMA_WORDS: dict[tuple[str, str], tuple[object, int]] = {}
"""Word counts of the tool specs seen, with the parameters they were counted from (a spec
rebuilt with other parameters under the same name is counted again)."""


class _Pacer:
    """When each piece of one answer is due. A real model's server streams at its own pace,
    so a reader that fell behind (a busy event loop) finds what piled up and reads it at once;
    the demo does the same, pacing against a schedule from the start of the answer rather
    than sleeping a piece's time after each piece, which would stretch the answer by every
    delay of the reader's loop. At speed 0 nothing sleeps, but control is still yielded (every
    `YIELD_EVERY` pieces) so a cancel gets through.

    Its methods only say how long to wait (`DemoProvider._wait` does it): seconds to sleep,
    0 to yield control, None to go on at once, so a piece already due costs no coroutine."""

    def __init__(self, provider: DemoProvider, speed: float) -> None:
        self._provider = provider
        self._speed = speed
        self._due = provider._now()
        self._count = 0

    def piece(self, piece: str) -> float | None:
        self._count += 1
        if self._speed == 0:
            return 0.0 if self._count % YIELD_EVERY == 0 else None
        return self._until(len(piece) / (CHARS_PER_SECOND * self._speed))

    def wait(self, seconds: float) -> float | None:
        if self._speed == 0:
            return 0.0
        return self._until(seconds / self._speed)

    def _until(self, seconds: float) -> float | None:
        self._due += seconds
        delay = self._due - self._provider._now()
        if delay > 0:
            return delay
        if self._count % YIELD_EVERY == 0:  # behind schedule: catch up, yielding now and then
            return 0.0
        return None


def _failure_asked(text: str) -> re.Match[str] | None:
    """Whether (and how) a user message asks for provider errors; cached for short messages,
    as every call of a session asks again of the same message."""
    if len(text) > 4096:
        return _PROVIDER_ERROR.search(text.lower())
    return _short_failure_asked(text)


@functools.lru_cache(maxsize=256)
def _short_failure_asked(text: str) -> re.Match[str] | None:
    return _PROVIDER_ERROR.search(text.lower())


def _check_speed(speed: float) -> float:
    if not math.isfinite(speed) or speed < 0:
        raise ValueError(f"demo speed must be a finite number >= 0, got {speed!r}")
    return speed
