"""The vendor-neutral half of the token-limited model servers (tests/support/window_models.py):
their own token counter, the conversation they read from a request, the replies they make up,
the record of every request, and the raw HTTP on 127.0.0.1 they share.

The counter is deliberately not `len(text) / 4`: like a real tokenizer it counts words and
punctuation runs (long words cost more), so an estimate made by the runtime is approximate, as
it is against a real server, and only the server's own 400 tells the truth.
"""

from __future__ import annotations

import abc
import asyncio
import hashlib
import json
import re
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, ClassVar

from .window_http import HttpServer

SUMMARY_MARKER = "You compress a conversation"
"""A request whose system prompt starts with this is a summarization request."""

_TOKEN = re.compile(r"[^\W\d_]+|\d{1,3}|[^\w\s]+|_+")
_LETTERS_PER_TOKEN = 7
_MARKER = re.compile(r"\[tool:(?P<name>[\w.-]+)\s*(?P<args>\{.*?\})?\]", re.S)
_USER_LINE = re.compile(r"^\s*User:\s*(.+)$", re.M)

_FILLER = (
    "A durable session keeps its history in the database, so a worker that dies loses nothing "
    "that was committed.",
    "Every answer is streamed as it is written and then stored whole, which is what a reader "
    "sees again after a reload.",
    "Tool calls are recorded before they run and their results right after, so a resumed run "
    "knows what already happened.",
    "Leases expire when a worker stops renewing them, and another worker picks the session up "
    "where the log ends.",
    "Follow-up messages wait in order until the current turn is over and are then delivered to "
    "the model together.",
    "A long conversation eventually outgrows what the model can read at once, and something has "
    "to give way.",
    "Summaries replace the oldest part of the history while the newest messages stay verbatim.",
    "Nothing in the log is ever rewritten; the summary is one more event that later requests "
    "start from.",
    "Retries wait a little longer each time and every attempt is visible as its own event.",
    "The person can cancel at any moment and the model call is aborted within a second.",
    "Idempotent tools may run again after a crash, the others are reported as interrupted.",
    "Counting tokens exactly needs the vendor's tokenizer, so an estimate keeps a margin.",
)


def count_tokens(text: str) -> int:
    """This server's tokens in `text`: one per punctuation run, per up to three digits, and
    per seven letters of a word."""
    n = 0
    for m in _TOKEN.finditer(text):
        s = m.group()
        n += 1 + (len(s) - 1) // _LETTERS_PER_TOKEN if s[0].isalpha() else 1
    return n


def cut_to_tokens(text: str, limit: int) -> str:
    """The longest start of `text` that costs at most `limit` tokens."""
    n = 0
    for m in _TOKEN.finditer(text):
        s = m.group()
        n += 1 + (len(s) - 1) // _LETTERS_PER_TOKEN if s[0].isalpha() else 1
        if n > limit:
            return text[: m.start()]
    return text


def json_tokens(value: Any) -> int:
    return count_tokens(json.dumps(value, ensure_ascii=False, sort_keys=True))


@dataclass(frozen=True)
class Call:
    """A tool call, its arguments as the JSON text sent or received."""

    id: str
    name: str
    arguments: str


@dataclass(frozen=True)
class Turn:
    """One message of a request in neutral form: `user`, `assistant` (with its calls) or
    `tool` (answering the call `answers`)."""

    role: str
    text: str = ""
    calls: tuple[Call, ...] = ()
    answers: str | None = None


@dataclass(frozen=True)
class Conversation:
    system: str
    turns: list[Turn]

    @property
    def summary(self) -> bool:
        return self.system.lstrip().startswith(SUMMARY_MARKER)


@dataclass
class Exchange:
    """One request the server read, and what became of it (for the tests' assertions)."""

    vendor: str
    body: dict[str, Any]
    turns: list[Turn]
    summary: bool
    tokens: int
    """The prompt's tokens by this server's count (messages, system and tools)."""
    limit_tokens: int = 0
    """What was held against the window: `tokens`, plus `max_tokens` where it counts."""
    status: int = 200
    reason: str | None = None
    """Why it was refused: "context_length", "pairing", "invalid", "summary_failed"; or
    "summary_hung" for one left hanging."""
    error: str | None = None
    reply: str = ""
    calls: list[Call] = field(default_factory=list)
    output_tokens: int = 0
    finish: str = ""
    system: str = ""
    """The request's system prompt (OpenAI: its leading system messages)."""
    at: float = field(default_factory=time.monotonic)

    @property
    def accepted(self) -> bool:
        return self.status == 200

    @property
    def last_user_text(self) -> str:
        return next((t.text for t in reversed(self.turns) if t.role == "user"), "")


class Refusal(Exception):
    """An error answer: the HTTP status, the vendor's JSON body, and why (for the record)."""

    def __init__(self, status: int, body: dict[str, Any], reason: str) -> None:
        super().__init__(reason)
        self.status, self.body, self.reason = status, body, reason


def markers(text: str) -> list[tuple[str, str]]:
    """`[tool:NAME {json}]` markers in a user message: (name, arguments JSON)."""
    return [(m["name"], m["args"] or "{}") for m in _MARKER.finditer(text)]


def answer_text(user_text: str, results: list[tuple[str, str]], chars: int) -> str:
    """A made-up answer of about `chars` characters that quotes the message it answers (and
    the tool results it was given), so a test can tell which message got which answer."""
    quote = " ".join(user_text.split())[:200]
    parts = [f"Answer to «{quote}»."]
    parts += [f"The {name} tool said: {' '.join(text.split())[:160]}" for name, text in results]
    start = hashlib.sha256(user_text.encode()).digest()[0]
    i = 0
    while len(" ".join(parts)) < chars:
        parts.append(_FILLER[(start + i) % len(_FILLER)])
        i += 1
    text = " ".join(parts)
    if len(text) > chars and len(parts[0]) < chars:
        text = text[:chars].rsplit(" ", 1)[0].rstrip(",;:") + "."
    return text


def summary_text(turns: list[Turn], limit: int = 600) -> str:
    """The first 12 words of every `User:` line of the request, oldest dropped first to stay
    within `limit` characters."""
    text = "\n".join(t.text for t in turns)
    items = [" ".join(m.split()[:12]) for m in _USER_LINE.findall(text)]
    if not items:
        items = [" ".join(text.split()[:12])]
    out = "Summary: " + " | ".join(items)
    while len(out) > limit and len(items) > 1:
        items.pop(0)
        out = "Summary: … " + " | ".join(items)
    return out[:limit]


def plan_reply(conv: Conversation, chars: int, new_id: Any) -> tuple[str, list[Call]]:
    """What to answer: a summary, tool calls asked for by the last user message's markers, or
    an answer to the last user message (mentioning the tool results since)."""
    if conv.summary:
        return summary_text(conv.turns), []
    turns = conv.turns
    last_user = max((i for i, t in enumerate(turns) if t.role == "user"), default=-1)
    user_text = turns[last_user].text if last_user >= 0 else ""
    after = turns[last_user + 1:]
    asked = markers(user_text)
    if asked and not after:
        return "", [Call(new_id(), name, args) for name, args in asked]
    names = {c.id: c.name for t in turns for c in t.calls}
    results = [(names.get(t.answers or "", "?"), t.text) for t in after if t.role == "tool"]
    return answer_text(user_text, results, chars), []


def pieces(text: str, words: int) -> list[str]:
    """`text` in streamed pieces of about `words` words each, whitespace kept."""
    tokens = re.findall(r"\S+\s*|\s+", text)
    return ["".join(tokens[i:i + words]) for i in range(0, len(tokens), words)] or [""]


def error_text(body: dict[str, Any]) -> str:
    inner = body.get("error")
    return str(inner.get("message", "")) if isinstance(inner, dict) else str(inner)


def split_pair(turns: list[Turn]) -> str | None:
    """Why `turns` separate a tool call from its result, or None: every `tool` turn answers a
    call of the assistant message right before its run of results, and every call is
    answered before the next other message."""
    allowed: set[str] = set()
    open_: set[str] = set()
    for i, t in enumerate(turns):
        if t.role == "tool":
            if t.answers not in allowed:
                return f"message {i} answers {t.answers!r}, not a call just before it"
            open_.discard(t.answers)
            continue
        if open_:
            return f"calls {sorted(open_)} have no result before message {i}"
        allowed = {c.id for c in t.calls} if t.role == "assistant" else set()
        open_ = set(allowed)
    return f"calls {sorted(open_)} have no result at the end" if open_ else None


def check_pairs(requests: Iterable[Exchange]) -> int:
    """Assert that no request was refused for pairing and that no accepted one separated a
    tool call from its result; returns how many calls the accepted requests carried, so a
    test can tell it checked something."""
    calls = 0
    for n, x in enumerate(requests):
        assert x.reason != "pairing", f"request {n} was refused for pairing: {x.error}"
        if not x.accepted:
            continue
        problem = split_pair(x.turns)
        assert problem is None, f"accepted request {n} split a tool call: {problem}"
        calls += sum(len(t.calls) for t in x.turns)
    return calls


class WindowServer(HttpServer):
    """A model server with a context window of `window` tokens by its own count.

    Each request is checked like the vendor checks it (tool-call pairing, then size), then
    answered with a made-up reply (see `plan_reply`), streamed or not as asked. Everything
    read is kept in `requests`. Attributes may be changed between requests: `window`,
    `fail_summaries` (True for 500, or a status), `hang_summaries`, `validate_pairs`.
    """

    vendor: ClassVar[str] = ""
    path: ClassVar[str] = ""
    counts_max_tokens: ClassVar[bool] = True

    def __init__(self, window: int, *, count_max_tokens: bool | None = None,
                 fail_summaries: bool | int = False, hang_summaries: bool = False,
                 validate_pairs: bool = True, answer_chars: int = 1400,
                 words_per_chunk: int = 4, delay: float = 0.0) -> None:
        super().__init__()
        self.window = window
        self.count_max_tokens = (self.counts_max_tokens if count_max_tokens is None
                                 else count_max_tokens)
        self.fail_summaries = fail_summaries
        self.hang_summaries = hang_summaries
        self.validate_pairs = validate_pairs
        self.answer_chars = answer_chars
        self.words_per_chunk = words_per_chunk
        self.delay = delay
        self.requests: list[Exchange] = []
        self.summary_hanging = asyncio.Event()
        """Set once a summarization request is left hanging (`hang_summaries`)."""
        self._ids = 0

    async def start(self) -> WindowServer:
        await super().start()
        return self

    @property
    def base_url(self) -> str:
        """What the vendor's SDK takes as `base_url`."""
        return self.url

    @property
    def accepted(self) -> list[Exchange]:
        return [x for x in self.requests if x.accepted]

    @property
    def refused(self) -> list[Exchange]:
        return [x for x in self.requests if not x.accepted]

    @property
    def summaries(self) -> list[Exchange]:
        """Summarization requests answered."""
        return [x for x in self.accepted if x.summary]

    @property
    def answers(self) -> list[Exchange]:
        """Conversation requests answered (tool calls and answers, not summaries)."""
        return [x for x in self.accepted if not x.summary]

    def check_pairs(self) -> int:
        """`check_pairs` of every request so far."""
        return check_pairs(self.requests)

    def next_id(self) -> int:
        self._ids += 1
        return self._ids

    # The vendor's part.
    @abc.abstractmethod
    def conversation(self, body: dict[str, Any]) -> Conversation:
        """The request in neutral form; Refusal("invalid") when malformed."""
        ...

    @abc.abstractmethod
    def pairing(self, body: dict[str, Any]) -> None:
        """Refusal("pairing") when a tool call and its result are apart."""
        ...

    @abc.abstractmethod
    def count(self, body: dict[str, Any]) -> tuple[int, int]:
        """(tokens of the messages and system prompt, tokens of the tool schemas)."""
        ...

    @abc.abstractmethod
    def max_tokens(self, body: dict[str, Any]) -> int | None:
        ...

    @abc.abstractmethod
    def overflow(self, parts: tuple[int, int], max_tokens: int | None) -> Refusal:
        ...

    @abc.abstractmethod
    def failure(self, status: int) -> dict[str, Any]:
        ...

    @abc.abstractmethod
    def not_found(self, method: str, path: str) -> dict[str, Any]:
        ...

    @abc.abstractmethod
    def new_call_id(self) -> str:
        ...

    def preface(self, calls: list[Call]) -> str:
        """Text the model says before its tool calls."""
        return ""

    @abc.abstractmethod
    def stream_events(self, x: Exchange) -> list[bytes]:
        ...

    @abc.abstractmethod
    def message(self, x: Exchange) -> dict[str, Any]:
        ...

    async def serve(self, method: str, path: str, body: Any, reader: asyncio.StreamReader,
                    writer: asyncio.StreamWriter) -> bool:
        if method != "POST" or path.split("?")[0] != self.path:
            await self.send_json(writer, 404, self.not_found(method, path))
            return True
        body = body if isinstance(body, dict) else {}
        x = Exchange(self.vendor, body, [], False, 0)
        try:
            conv = self.conversation(body)
            x.turns, x.summary, x.system = conv.turns, conv.summary, conv.system
            if self.validate_pairs:
                self.pairing(body)
            parts = self.count(body)
            limit = self.max_tokens(body)
            x.tokens = sum(parts)
            x.limit_tokens = x.tokens + ((limit or 0) if self.count_max_tokens else 0)
            if x.summary and self.hang_summaries:
                x.status, x.reason = 0, "summary_hung"
                self.requests.append(x)
                self.summary_hanging.set()
                await self.hang(reader)
                return False
            if x.summary and self.fail_summaries:
                status = 500 if self.fail_summaries is True else int(self.fail_summaries)
                raise Refusal(status, self.failure(status), "summary_failed")
            if x.limit_tokens > self.window:
                raise self.overflow(parts, limit)
        except Refusal as r:
            x.status, x.reason, x.error = r.status, r.reason, error_text(r.body)
            self.requests.append(x)
            await self.send_json(writer, r.status, r.body)
            return True
        self._answer(x, conv, limit)
        self.requests.append(x)
        if body.get("stream"):
            await self.send_stream(writer, self.stream_events(x), self.delay)
        else:
            await self.send_json(writer, 200, self.message(x))
        return True

    def _answer(self, x: Exchange, conv: Conversation, limit: int | None) -> None:
        """The reply, cut where `max_tokens` or the window's end stops it."""
        text, calls = plan_reply(conv, self.answer_chars, self.new_call_id)
        finish = "tool_calls" if calls else "stop"
        if calls:
            text = self.preface(calls)
        room = self.window - x.tokens
        budget = room if limit is None else min(limit, room)
        if count_tokens(text) > budget:
            text = cut_to_tokens(text, max(budget, 0))
            calls, finish = [], "max_tokens" if limit is not None and limit <= room else "window"
        x.reply, x.calls, x.finish = text, calls, finish
        x.output_tokens = count_tokens(text) + sum(
            3 + count_tokens(c.name) + count_tokens(c.arguments) for c in calls)
