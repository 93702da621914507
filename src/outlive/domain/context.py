"""The model's view of a long history, and how to make it smaller (docs/context.md).

The history a run commits only grows; what the model is sent need not. A `summary` entry,
written under the run's lease like any other entry, stands in for a prefix of the history in
the model's view only: the newest one says which entries it covers (`through`), the text that
replaces them, and which later tool results the model sees as a stub. Nothing is deleted,
the event log and every replay keep everything.

Cuts are pair-safe by construction: a prefix ends before a user message or an assistant
message, never between a tool call and its result, never after the newest user message, and
only where every tool call it holds has its result inside it (so an unanswered approval or a
call that still runs is never covered).

Token counts here are estimates (`estimate_text`); the runtime corrects them with what the
provider reported for the last call.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from .resume import visible

__all__ = [
    "MESSAGE_OVERHEAD",
    "SUMMARY_KIND",
    "CompactionPlan",
    "ContextView",
    "Overflow",
    "SeqEntry",
    "Window",
    "entry_tokens",
    "estimate_text",
    "known_window",
    "parse_overflow",
    "plan_compaction",
    "summary_data",
    "view_of",
]

SUMMARY_KIND = "summary"
"""The kind of the history entry that stands in for a prefix in the model's view."""

MESSAGE_OVERHEAD = 4
"""Tokens a chat format spends on each message besides its text (role, separators)."""

BYTES_PER_TOKEN = 3.0
"""The estimate: one token per three bytes of UTF-8. Tokenizers of current models spend about
four bytes per token on English prose and three on JSON and code, so this overestimates prose
by a quarter, which errs on the side of compacting a little early. No tokenizer ships with
the server (`tiktoken` downloads its encodings at run time), so the provider's reported usage
of the last call corrects it (`runtime.context`)."""


class SeqEntry(Protocol):
    """A history entry as the view needs it (`model.Entry` is one)."""

    @property
    def seq(self) -> int: ...
    @property
    def kind(self) -> str: ...
    @property
    def data(self) -> dict[str, Any]: ...


# ---- the window ---------------------------------------------------------------------------

_KNOWN: tuple[tuple[str, int], ...] = (
    # longest prefix first; read from the providers' model pages, 2026-12
    ("gpt-4.1", 1_047_576),
    ("gpt-4o", 128_000),
    ("gpt-4-turbo", 128_000),
    ("gpt-4-32k", 32_768),
    ("gpt-4", 8_192),
    ("gpt-3.5-turbo", 16_385),
    ("gpt-5", 400_000),
    ("o4-mini", 200_000),
    ("o3", 200_000),
    ("o1", 200_000),
    ("claude-", 200_000),
    ("llama3.1", 131_072),
    ("llama3.2", 131_072),
    ("qwen2.5", 32_768),
)


def known_window(model: str) -> int | None:
    """The context window of a well-known model by name (None: not known; the runtime then
    learns it from the provider's first refusal, or from configuration)."""
    name = model.strip().lower()
    for prefix, tokens in _KNOWN:
        if name.startswith(prefix):
            return tokens
    return None


@dataclass(frozen=True)
class Window:
    """A model's context window, the part kept for its answer, and when to compact."""

    size: int
    reserve: int
    threshold: float = 0.8
    """Compact when a call would pass this share of the window."""
    target: float = 0.5
    """What compaction aims for, as a share of the room left after the reserve."""

    @classmethod
    def of(cls, size: int, *, max_tokens: int | None = None, reserve: int | None = None,
           threshold: float | None = None) -> Window:
        """A window with the default reserve: the answer's `max_tokens` when set, else an
        eighth of the window (at least 256, at most 4,096 tokens)."""
        if reserve is None:
            reserve = max_tokens if max_tokens else min(4096, max(256, size // 8))
        reserve = max(0, min(reserve, size // 2))
        return cls(size, reserve, 0.8 if threshold is None else threshold)

    @property
    def budget(self) -> int:
        """Tokens the request itself may use."""
        return self.size - self.reserve

    def over(self, tokens: int) -> bool:
        """Whether a request of `tokens` should be compacted first."""
        return tokens > min(self.threshold * self.size, self.budget)

    def goal(self) -> int:
        return int(self.budget * self.target)


# ---- counting -------------------------------------------------------------------------------


def estimate_text(text: str) -> int:
    return math.ceil(len(text.encode("utf-8", "surrogatepass")) / BYTES_PER_TOKEN)


def entry_tokens(kind: str, data: Mapping[str, Any], *, trimmed: bool = False) -> int:
    """The estimated tokens of one entry as the model is sent it (`runtime.history`)."""
    if kind == "user":
        return MESSAGE_OVERHEAD + estimate_text(str(data.get("text", "")))
    if kind == "assistant":
        n = MESSAGE_OVERHEAD + estimate_text(str(data.get("text", "")))
        for call in data.get("tool_calls") or []:
            n += MESSAGE_OVERHEAD + estimate_text(
                str(call.get("name", "")) + json.dumps(call.get("arguments") or {}))
        for block in data.get("reasoning") or []:
            n += estimate_text(json.dumps(block))
        return n
    if kind == "tool_result":
        if trimmed:
            return MESSAGE_OVERHEAD + estimate_text(trim_stub(data))
        body = data.get("result") if data.get("ok") else {"error": data.get("error")}
        return MESSAGE_OVERHEAD + estimate_text(json.dumps(body, ensure_ascii=False))
    return 0


def trim_stub(data: Mapping[str, Any]) -> str:
    """What the model sees of a trimmed tool result: that there was one, not its content."""
    body = data.get("result") if data.get("ok") else data.get("error")
    size = len(json.dumps(body, ensure_ascii=False))
    state = "succeeded" if data.get("ok") else "failed"
    return json.dumps({"trimmed": True, "note": (
        f"The result of this call to {data.get('name', 'the tool')} ({state}, {size} "
        "characters) was left out to save context; call the tool again if you need it.")})


# ---- the view ------------------------------------------------------------------------------


@dataclass(frozen=True)
class ContextView:
    """What the model is sent of a history: the summary standing in for the entries up to
    `through`, then the visible entries after it, with the `trimmed` tool results as stubs."""

    entries: list[SeqEntry]
    summary: str | None = None
    through: int = 0
    covered: int = 0
    trimmed: frozenset[int] = frozenset()
    based_on: int = 0
    """Seq of the summary entry in effect (0: none)."""

    def tokens(self) -> int:
        """The estimate of the view's entries and summary (not the system prompt or tools)."""
        n = MESSAGE_OVERHEAD + estimate_text(self.summary) if self.summary else 0
        return n + sum(entry_tokens(e.kind, e.data, trimmed=e.seq in self.trimmed)
                       for e in self.entries)


def view_of(entries: Sequence[SeqEntry]) -> ContextView:
    """The model's view of `entries`: the newest summary entry decides it."""
    latest: SeqEntry | None = None
    for e in reversed(entries):
        if e.kind == SUMMARY_KIND:
            latest = e
            break
    if latest is None:
        return ContextView([e for e in _visible(entries) if e.kind != SUMMARY_KIND])
    d = latest.data
    through = int(d.get("through") or 0)
    kept = [e for e in _visible(entries) if e.seq > through and e.kind != SUMMARY_KIND]
    text = d.get("text")
    return ContextView(
        kept, summary=text if isinstance(text, str) and text else None, through=through,
        covered=int(d.get("covered") or 0),
        trimmed=frozenset(int(s) for s in d.get("trimmed") or ()), based_on=latest.seq)


def _visible(entries: Sequence[SeqEntry]) -> list[SeqEntry]:
    """`resume.visible`, keeping the entries' type."""
    shown = {id(e) for e in visible(entries)}
    return [e for e in entries if id(e) in shown]


# ---- planning -----------------------------------------------------------------------------


@dataclass(frozen=True)
class CompactionPlan:
    """What to change in the view: tool results to trim, and the prefix to cover (`cut`
    entries of the view's `entries`; 0: none)."""

    trim: frozenset[int] = frozenset()
    cut: int = 0
    tokens_after: int = 0
    """The estimate of the view after the plan, the summary counted at its budget."""
    covered: list[SeqEntry] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        return not self.trim and not self.cut


def valid_cuts(entries: Sequence[SeqEntry]) -> list[int]:
    """The places a prefix of `entries` may end (the count of entries it covers): before a
    user message, or before an assistant message that carries on after tool results (never
    between a message and the answer to it), at or before the newest user message, and only
    where every tool call inside the prefix has its result inside it."""
    newest_user = max((i for i, e in enumerate(entries) if e.kind == "user"), default=-1)
    cuts: list[int] = []
    open_calls: set[str] = set()
    for i, e in enumerate(entries):
        if i > newest_user:
            break
        step = e.kind == "user" or (e.kind == "assistant"
                                     and entries[i - 1].kind == "tool_result")
        if i > 0 and step and not open_calls:
            cuts.append(i)
        if e.kind == "assistant":
            open_calls |= {str(c.get("call_id")) for c in e.data.get("tool_calls") or []}
        elif e.kind == "tool_result":
            open_calls.discard(str(e.data.get("call_id")))
    return cuts


def plan_compaction(
    view: ContextView, *, fixed: int, window: Window, summary_budget: int,
    scale: float = 1.0, force: bool = False, deep: bool = False,
) -> CompactionPlan:
    """The cheapest change that brings the request (`fixed`: system prompt and tools) under
    the window's goal: first trim old, large tool results (oldest first), then cover the
    shortest prefix that suffices, or the longest allowed. `scale` corrects the estimates
    (measured tokens / estimated). `force` (a manual compaction, or the provider refused the
    call) covers what it can even when the estimate says it fits; `deep` (a manual
    compaction) covers the longest prefix allowed."""
    entries = view.entries
    cost = [scale * entry_tokens(e.kind, e.data, trimmed=e.seq in view.trimmed)
            for e in entries]
    summary_cost = scale * (MESSAGE_OVERHEAD + estimate_text(view.summary)) if view.summary else 0
    goal = window.goal()
    total = fixed + summary_cost + sum(cost)
    # 1. trim: tool results not answering the two newest assistant messages
    answers = [i for i, e in enumerate(entries) if e.kind == "assistant"]
    protect_from = answers[-2] if len(answers) >= 2 else 0
    floor = max(64.0, window.size / 40)
    trim: set[int] = set()
    for i, e in enumerate(entries):
        if total <= goal and not force:
            break
        if i >= protect_from or e.kind != "tool_result" or e.seq in view.trimmed:
            continue
        if cost[i] <= floor:
            continue
        stub = scale * entry_tokens(e.kind, e.data, trimmed=True)
        total -= cost[i] - stub
        cost[i] = stub
        trim.add(e.seq)
    if total <= goal and not force:
        return CompactionPlan(frozenset(trim), 0, math.ceil(total))
    # 2. cover a prefix with a summary
    cuts = valid_cuts(entries)
    if not cuts:
        return CompactionPlan(frozenset(trim), 0, math.ceil(total))
    chosen = cuts[-1]
    for cut in [] if deep else cuts:
        after = fixed + summary_budget + sum(cost[cut:])
        if after <= goal:
            chosen = cut
            break
    after = fixed + summary_budget + sum(cost[chosen:])
    kept_trim = frozenset(s for s in trim if s > entries[chosen - 1].seq)
    return CompactionPlan(kept_trim | _still_trimmed(view, entries[chosen - 1].seq), chosen,
                          math.ceil(after), list(entries[:chosen]))


def _still_trimmed(view: ContextView, through: int) -> frozenset[int]:
    return frozenset(s for s in view.trimmed if s > through)


def summary_data(
    view: ContextView, plan: CompactionPlan, *, method: str, text: str | None,
    reason: str, tokens_before: int, tokens_after: int, route: str | None = None,
) -> dict[str, Any]:
    """The data of the `summary` entry that makes `plan` the view (self-contained: the newest
    summary entry alone decides the view)."""
    if plan.cut:
        through = plan.covered[-1].seq
        covered = view.covered + plan.cut
        trimmed = sorted(plan.trim)
    else:
        through, covered, text = view.through, view.covered, view.summary
        trimmed = sorted(plan.trim | view.trimmed)
    return {"through": through, "text": text, "covered": covered, "trimmed": trimmed,
            "method": method, "reason": reason, "tokens_before": tokens_before,
            "tokens_after": tokens_after, "route": route}


# ---- refusals -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Overflow:
    """A provider refused a request as longer than its window, with what it said of both."""

    window: int | None
    requested: int | None


_OVERFLOW_PATTERNS: tuple[tuple[re.Pattern[str], str], ...] = (
    # OpenAI, vLLM and most OpenAI-compatible servers
    (re.compile(r"maximum context length is (?P<window>\d+) tokens.*?(?:resulted in|requested)"
                r" (?P<requested>\d+) tokens", re.S | re.I), ""),
    (re.compile(r"maximum context length is (?P<window>\d+) tokens", re.I), ""),
    # Anthropic
    (re.compile(r"prompt is too long: (?P<requested>\d+) tokens > (?P<window>\d+) maximum",
                re.I), ""),
    (re.compile(r"input length and `?max_tokens`? exceed context limit: (?P<a>\d+) \+ "
                r"(?P<b>\d+) > (?P<window>\d+)", re.I), "sum"),
    # llama.cpp's server
    (re.compile(r"request \((?P<requested>\d+) tokens\) exceeds the available context size "
                r"\((?P<window>\d+) tokens\)", re.I), ""),
    (re.compile(r"exceeds the available context size", re.I), ""),
    # llama-cpp-python in process (the local model)
    (re.compile(r"Requested tokens \((?P<requested>\d+)\) exceed context window of "
                r"(?P<window>\d+)", re.I), ""),
    (re.compile(r"context_length_exceeded|context window exceeded|too many tokens", re.I), ""),
)


def parse_overflow(message: str) -> Overflow | None:
    """Whether a provider's error message says the request was too long, and the numbers it
    gave; None for any other error."""
    for pattern, how in _OVERFLOW_PATTERNS:
        m = pattern.search(message)
        if m is None:
            continue
        groups = m.groupdict()
        window = int(groups["window"]) if groups.get("window") else None
        if how == "sum":
            requested: int | None = int(groups["a"]) + int(groups["b"])
        else:
            requested = int(groups["requested"]) if groups.get("requested") else None
        return Overflow(window, requested)
    return None
