"""Keeping a run's model calls inside the model's context window (docs/context.md).

Before each model call the run measures its request: the provider's reported usage of the
last call scales the estimate of what the model would be sent now (or the provider counts it
itself, as the local model does with its own tokenizer). Past the threshold, `Compactor`
trims old tool results, then has a summarizer write a summary of the oldest turns, and writes
the `summary` entry and its `context_compacted` event in one fenced commit. A summarizer that
fails, or is cut off, leaves the view as it was; the run then leaves out the oldest turns
instead (a marked truncation), so a session never fails while its newest message fits.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ..domain.context import (
    MESSAGE_OVERHEAD,
    SUMMARY_KIND,
    CompactionPlan,
    ContextView,
    SeqEntry,
    Window,
    estimate_text,
    known_window,
    plan_compaction,
    summary_data,
    view_of,
)
from ..domain.events import ContextCompacted
from ..providers import (
    ContextLimits,
    Message,
    ModelProvider,
    ModelSettings,
    ProviderError,
    ToolSpec,
    collect,
)
from .activity import Supervisor
from .agents import Agent
from .settings import RuntimeSettings
from .usage import CallMeter
from .writes import RunWrites

__all__ = ["SUMMARIZER_PROMPT", "Compactor", "Measure"]

log = logging.getLogger("outlive.runtime")

SUMMARIZER_PROMPT = (
    "You compress a conversation between a user and an AI assistant into a summary that the "
    "assistant will read instead of the conversation itself. Keep every fact, decision, name, "
    "number, file, open question and unfinished task, and what the tools returned that still "
    "matters; drop greetings and repetition. Write plain prose or short bullet points, in the "
    "conversation's language, addressed to no one. Reply with the summary only."
)

SummarizerResolver = Callable[[str], tuple[ModelProvider, str]]
"""Route → (provider, model name): how a configured summarizer route is reached."""


@dataclass(frozen=True)
class Measure:
    """The request the model would be sent now, measured."""

    tokens: int
    estimate: int
    """The plain estimate of the same request (`domain.context.estimate_text`)."""
    fixed: int
    """Of `estimate`: the system prompt and the tool schemas."""

    @property
    def scale(self) -> float:
        """Measured / estimated: how far the estimate is off for this model."""
        if self.estimate <= 0:
            return 1.0
        return max(0.25, min(4.0, self.tokens / self.estimate))


class _Interrupted(Exception):
    """The summarizer was cut off by a cancel or an interrupt."""


class Compactor:
    """Measures a run's requests and compacts its model view when they grow too long."""

    def __init__(
        self, session_id: str, agent: Agent, provider: ModelProvider, model_name: str,
        route: str, limits: ContextLimits, settings: RuntimeSettings, writes: RunWrites,
        activity: Supervisor, summarizers: SummarizerResolver | None = None,
        *, enabled: bool = True,
    ) -> None:
        self.session_id = session_id
        self.agent = agent
        self.provider = provider
        self.model_name = model_name
        self.route = route
        self.limits = limits
        self.settings = settings
        self.writes = writes
        self.activity = activity
        self.summarizers = summarizers
        self.enabled = enabled
        """False: the session asked never to be compacted (`truncation: "disabled"` on the
        Responses surface); a request too long for the window then fails the session."""
        self.last: Measure | None = None
        """The measure of the request the run sent last."""
        self.requested = False
        """Someone asked for a compaction (`POST …/compact`): the next measure compacts as
        far as it can, and its write clears the request."""
        self.meter: CallMeter | None = None
        """Numbers and prices the run's calls: a summary's entry carries its call too."""
        self.calibration: float | None = None
        """Tokens per estimated token, from a refusal that said how long the request was."""
        self.scale: float | None = None
        """Reported / estimated at the last measure the provider's usage made: a view just
        compacted, with no call on it yet, is measured with it, not the bare estimate (which,
        for a provider whose tokens are not the estimate's, would compact it again at once)."""

    # -- the window ---------------------------------------------------------------------------

    def window(self) -> Window | None:
        """The model's window: the agent's setting, the route's, the provider's own, or the
        model's known default; never more than a refusal taught. None: not known yet."""
        size = self.agent.context_window or self.limits.window
        if size is None:
            own = getattr(self.provider, "context_window", None)
            size = own(self.model_name) if callable(own) else None
        if size is None:
            size = known_window(self.model_name)
        if self.limits.learned is not None:
            size = min(size, self.limits.learned) if size else self.limits.learned
        if not size:
            return None
        reserve = self.agent.output_reserve
        if reserve is None:
            reserve = self.limits.reserve
        threshold = self.agent.compact_at or self.settings.context_threshold
        return Window.of(size, max_tokens=self.agent.max_tokens, reserve=reserve,
                         threshold=threshold)

    # -- measuring ----------------------------------------------------------------------------

    def measure(self, view: ContextView, messages: list[Message],
                tools: list[ToolSpec]) -> Measure:
        """The tokens of the request `messages` + `tools` (the rendering of `view`)."""
        fixed = _fixed_tokens(messages, tools)
        estimate = fixed + view.tokens()
        counter = getattr(self.provider, "count_tokens", None)
        if callable(counter):
            try:
                counted = counter(messages, tools, self.model_name)
            except Exception as exc:  # a counter is a help, never a failure
                log.debug("token count of %s failed: %s", self.session_id, exc)
            else:
                if isinstance(counted, int) and counted > 0:
                    return Measure(counted, estimate, fixed)
        reported = _reported(view, fixed)
        if reported:
            self.scale = Measure(reported, estimate, fixed).scale
            tokens = reported
        else:  # no call on this view yet (it was just compacted): the last known scale
            tokens = int(estimate * self.scale) if self.scale is not None else estimate
        if self.calibration is not None:
            tokens = max(tokens, int(estimate * self.calibration))
        return Measure(tokens, estimate, fixed)

    def refused(self, requested: int | None) -> None:
        """The provider refused the last request as too long, counting `requested` tokens:
        later measures are at least as long as the provider counts."""
        sent = self.last
        if requested and sent is not None and sent.estimate > 0:
            self.calibration = max(self.calibration or 0.0, requested / sent.estimate)

    # -- compacting ---------------------------------------------------------------------------

    def due(self, window: Window, measure: Measure) -> bool:
        return window.over(measure.tokens)

    def nominal(self, measure: Measure) -> Window:
        """A window to plan a manual compaction with when the model's is not known."""
        return Window.of(max(4 * measure.tokens, 4096), max_tokens=self.agent.max_tokens)

    async def done(self) -> None:
        """A manual compaction found nothing to make smaller: clear the request."""
        if self.requested:
            await self.writes.commit(compacted=True)
            self.requested = False

    async def compact(
        self, window: Window, measure: Measure, *, reason: str, force: bool = False,
    ) -> ContextCompacted | None:
        """Make the view smaller and write it; None when nothing could be made smaller."""
        if not self.enabled:
            return None
        view = view_of(self.writes.history)
        summary_budget = _summary_budget(window)
        # in the provider's tokens, as `measure.tokens` is: the estimates scaled
        plan = plan_compaction(view, fixed=int(measure.fixed * measure.scale), window=window,
                               summary_budget=summary_budget, scale=measure.scale,
                               force=force, deep=reason == "manual")
        if plan.empty:
            return None
        method, text, route, error = "trim", None, None, None
        call: dict[str, Any] = {}
        if plan.cut:
            route = self.agent.summarizer or self.route
            try:
                text, call = await self._summarize(view, plan, window, summary_budget, route)
                method = "summary"
            except _Interrupted:
                return None
            except Exception as exc:
                error = str(exc) or type(exc).__name__
                log.warning("summarizer for %s failed (%s); leaving out the oldest turns "
                            "instead", self.session_id, error)
                method, text = "truncation", _truncation_note(view, plan)
        tokens_after = plan.tokens_after
        if method == "summary" and text is not None:
            tokens_after += int(measure.scale * estimate_text(text)) - summary_budget
        data = summary_data(view, plan, method=method, text=text, reason=reason,
                            tokens_before=measure.tokens, tokens_after=max(tokens_after, 0),
                            route=route if method == "summary" else None)
        data.update(call)  # the summarizer's call, for the usage ledger
        users = [e.data.get("seq") for e in plan.covered if e.kind == "user"]
        seqs = [s for s in users if isinstance(s, int)]
        event = ContextCompacted(
            method=method, reason=reason, through_entry=int(data["through"]),
            covered_entries=int(data["covered"]), trimmed=len(data["trimmed"]),
            tokens_before=measure.tokens, tokens_after=int(data["tokens_after"]),
            window=window.size, first_seq=seqs[0] if seqs else None,
            last_seq=seqs[-1] if seqs else None, route=data["route"],
            summary=text if method == "summary" else None, error=error)
        await self.writes.commit([(SUMMARY_KIND, data)], [event.new()],
                                 compacted=self.requested)
        self.requested = False
        return event

    async def _summarize(self, view: ContextView, plan: CompactionPlan, window: Window,
                         budget: int, route: str) -> tuple[str, dict[str, Any]]:
        """The summary of the view's summary and the entries the plan covers, written by
        the summarizer as a supervised activity (a cancel cuts it off at once), and the
        `usage` and `call` of its entry (`CallMeter.fields`; none without a meter)."""
        provider, model = self.provider, self.model_name
        if self.agent.summarizer and self.summarizers is not None:
            provider, model = self.summarizers(self.agent.summarizer)
        room = max(window.size - budget - estimate_text(SUMMARIZER_PROMPT) - 64, 256)
        transcript = render_transcript(plan.covered, int(room * 2.5))
        prior = f"The summary so far:\n{view.summary}\n\n" if view.summary else ""
        messages = [Message.system(SUMMARIZER_PROMPT),
                    Message.user(f"{prior}The conversation to add to it:\n{transcript}")]
        settings = ModelSettings(model=model, max_tokens=budget, temperature=0.0,
                                 extra={**self.agent.extra, "session_id": self.session_id,
                                        "purpose": "summary"})
        started = CallMeter.start()
        act = asyncio.create_task(
            asyncio.wait_for(collect(provider.stream(messages, [], settings)),
                             self.settings.turn_timeout),
            name=f"summarize:{self.session_id}")

        async def nothing() -> None:
            return None

        await self.activity.supervise(act, nothing, pending=lambda: False)
        if act.cancelled():
            raise _Interrupted
        exc = act.exception()
        if isinstance(exc, TimeoutError):
            raise ProviderError(f"the summarizer took longer than {self.settings.turn_timeout:g}s")
        if exc is not None:
            raise exc
        done = act.result()
        text = done.text.strip()
        if not text:
            raise ProviderError("the summarizer answered with nothing")
        meter = self.meter
        return text, {} if meter is None else meter.fields(started, done.usage, model, route)


def render_transcript(entries: Sequence[SeqEntry], max_chars: int) -> str:
    """The covered entries as plain text for the summarizer, each item shortened so the whole
    fits in `max_chars`."""
    lines: list[str] = []
    for e in entries:
        d = e.data
        if e.kind == "user":
            lines.append(f"User: {d.get('text', '')}")
        elif e.kind == "assistant":
            if d.get("text"):
                lines.append(f"Assistant: {d.get('text')}")
            for c in d.get("tool_calls") or []:
                args = json.dumps(c.get("arguments") or {}, ensure_ascii=False)
                lines.append(f"Assistant called {c.get('name')}({args})")
        elif e.kind == "tool_result":
            body = d.get("result") if d.get("ok") else {"error": d.get("error")}
            lines.append(f"Tool {d.get('name')} returned: {json.dumps(body, ensure_ascii=False)}")
    if not lines:
        return ""
    each = max(max_chars // len(lines), 80)
    return "\n".join(line if len(line) <= each else line[: each - 1] + "…" for line in lines)


_NOTE = ("[{} earlier messages of this conversation were left out of your view to fit your "
         "context window; they are kept in the session's history.]")
_NOTES = re.compile(r"\s*" + re.escape(_NOTE).replace(r"\{\}", r"\d+") + r"\s*")
"""Any earlier truncation's note."""


def _truncation_note(view: ContextView, plan: CompactionPlan) -> str:
    """The summary so far, then the note. An earlier truncation's note is dropped: the new
    note counts those messages too, and notes piling up would take the room they free."""
    prior = _NOTES.sub("\n\n", view.summary or "").strip()
    note = _NOTE.format(view.covered + plan.cut)
    return f"{prior}\n\n{note}" if prior else note


def _summary_budget(window: Window) -> int:
    """Tokens a summary may take: an eighth of the window, 1,024 at most."""
    return max(64, min(1024, window.size // 8))


def _fixed_tokens(messages: list[Message], tools: list[ToolSpec]) -> int:
    system = sum(MESSAGE_OVERHEAD + estimate_text(m.text) for m in messages
                 if m.role == "system")
    schemas = sum(MESSAGE_OVERHEAD + estimate_text(
        t.name + t.description + json.dumps(t.parameters)) for t in tools)
    return system + schemas


def _reported(view: ContextView, fixed: int) -> int | None:
    """The provider's own count of the last call made on this view (its input and its
    answer), plus the estimate of what came after it; None when no call was made since the
    view last changed, or the provider reported nothing."""
    for i in range(len(view.entries) - 1, -1, -1):
        e = view.entries[i]
        if e.kind != "assistant" or e.seq < view.based_on:
            continue
        usage = e.data.get("usage")
        if not isinstance(usage, dict):
            return None
        used = int(usage.get("input_tokens") or 0) + int(usage.get("output_tokens") or 0)
        if used <= 0:
            return None
        estimate_then = fixed + ContextView(view.entries[: i + 1], view.summary,
                                            trimmed=view.trimmed).tokens()
        now = fixed + view.tokens()
        return int(used * now / max(estimate_then, 1))
    return None
