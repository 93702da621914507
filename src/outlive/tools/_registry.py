"""Typed tools and the registry that runs them.

A tool is a plain `async def fn(args: SomeModel, ctx: ToolContext)`: the pydantic model is both
the validator and the JSON schema the model sees, so the two cannot drift apart. The registry
turns everything that can go wrong (bad arguments, exceptions, timeouts, a cancel signal) into
a `ToolResult` with `ok=False`, because a failed tool must be recorded as a failure and never
crash the run or be mistaken for a success. Task cancellation alone propagates: that is how
the runtime aborts a run.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import json
import logging
import re
import time
import typing
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar

from pydantic import BaseModel, ValidationError
from pydantic_core import to_jsonable_python

from ..domain.events import UNSET, ToolEnd
from ..domain.tool_calls import ToolCall, ToolSpec
from ._cancel import CancelEvent, race, race_task

__all__ = [
    "ApprovalCheck",
    "InvalidArguments",
    "Tool",
    "ToolContext",
    "ToolDefinition",
    "ToolFailure",
    "ToolFunction",
    "ToolRegistry",
    "ToolResult",
    "tool",
]

log = logging.getLogger(__name__)

ArgsT = TypeVar("ArgsT", bound=BaseModel)

Callback = Callable[[str], Awaitable[None]]

_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


@functools.cache
def args_schema(model: type[BaseModel]) -> dict[str, Any]:
    """An arguments model's JSON schema, made once per model: it costs a millisecond or more,
    and tools made per run (a delegation tool per sub-agent, for each session) share models.
    Shared, so read only."""
    return model.model_json_schema()


async def _ignore(_: str) -> None:
    return None


def _nothing() -> None:
    return None


@dataclass(frozen=True)
class ToolContext:
    """What a running tool may know and do besides its arguments.

    The callbacks are supplied by the runtime (they append `tool_progress`, `stage` and
    `title` events); the defaults do nothing so tools can be called directly in tests.
    `cancel` is set when the session is cancelled or interrupted: the registry then cancels
    the tool's task, and long-running tools may also watch it to stop cooperatively.
    """

    session_id: str
    call_id: str
    cancel: asyncio.Event = field(default_factory=CancelEvent)
    progress: Callback = _ignore
    set_stage: Callback = _ignore
    set_title: Callback = _ignore

    @property
    def idempotency_key(self) -> str:
        """Stable across retries of the same call (after a crash), unique across calls:
        an idempotent tool uses it to recognise a repeat and return the first outcome."""
        return f"{self.session_id}:{self.call_id}"


ToolFunction = Callable[[ArgsT, ToolContext], Coroutine[Any, Any, Any]]

BoundCall = Callable[[ToolContext], Coroutine[Any, Any, Any]]
"""A call whose arguments are validated: all that is left is to run it in a context."""


ApprovalCheck = bool | Callable[[Any, ToolContext], bool]
"""`needs_approval`: always, never, or decided per call from the validated arguments."""


class InvalidArguments(ValueError):
    """The arguments do not fit the tool's schema; the message says how, for the model."""


class ToolDefinition(Protocol):
    """What the registry needs of a tool. `Tool` (typed Python functions) is one kind; tools
    adapted from elsewhere (MCP servers) are another, with the same timeout, cancel, progress
    and idempotency-key guarantees because the registry runs them all the same way.

    `destructive` marks a tool whose effects cannot be undone, so a caller can ask a person
    before it runs; `needs_approval` says whether this call must wait for a person's
    approval (docs/approvals.md)."""

    @property
    def name(self) -> str: ...

    @property
    def timeout(self) -> float: ...

    @property
    def idempotent(self) -> bool: ...

    @property
    def destructive(self) -> bool: ...

    def spec(self) -> ToolSpec: ...

    def needs_approval(self, arguments: dict[str, Any], ctx: ToolContext) -> bool: ...

    def bind(self, arguments: dict[str, Any]) -> BoundCall:
        """Validate `arguments`; raise `InvalidArguments` when they do not fit."""
        ...


@dataclass(frozen=True)
class Tool(Generic[ArgsT]):
    """A tool definition; build it with the `@tool(...)` decorator."""

    name: str
    description: str
    args_model: type[ArgsT]
    fn: ToolFunction[ArgsT]
    timeout: float = 30.0
    idempotent: bool = False
    destructive: bool = False
    approval: ApprovalCheck = False
    """`needs_approval` as given to `@tool`."""

    def __post_init__(self) -> None:
        if not _NAME.match(self.name):
            raise ValueError(f"tool name {self.name!r} must match {_NAME.pattern}")
        if not self.timeout > 0:
            raise ValueError(f"tool {self.name!r} needs a positive timeout")

    def spec(self) -> ToolSpec:
        """Built once: every model call needs it (and its schema once per arguments model)."""
        cached: ToolSpec | None = self.__dict__.get("_spec")
        if cached is None:
            cached = ToolSpec(self.name, self.description, args_schema(self.args_model))
            object.__setattr__(self, "_spec", cached)
        return cached

    def needs_approval(self, arguments: dict[str, Any], ctx: ToolContext) -> bool:
        """Arguments that do not validate need no approval: the call fails without running.
        A check that raises asks for approval, so a bug never lets a call through."""
        if isinstance(self.approval, bool):
            return self.approval
        try:
            args = self.args_model.model_validate(arguments)
        except ValidationError:
            return False
        try:
            return bool(self.approval(args, ctx))
        except Exception:
            log.exception("needs_approval of tool %s failed; asking for approval", self.name)
            return True

    def bind(self, arguments: dict[str, Any]) -> BoundCall:
        try:
            args = self.args_model.model_validate(arguments)
        except ValidationError as exc:
            raise InvalidArguments(_describe(self.name, exc)) from None
        fn = self.fn

        def call(ctx: ToolContext) -> Coroutine[Any, Any, Any]:
            return fn(args, ctx)

        return call

    async def __call__(self, args: ArgsT, ctx: ToolContext) -> Any:
        """Call the function directly: no validation, timeout or error capture."""
        return await self.fn(args, ctx)


def tool(
    *,
    name: str | None = None,
    description: str | None = None,
    timeout: float = 30.0,
    idempotent: bool = False,
    destructive: bool = False,
    needs_approval: bool | Callable[[ArgsT, ToolContext], bool] = False,
) -> Callable[[ToolFunction[ArgsT]], Tool[ArgsT]]:
    """Turn `async def fn(args: ArgsModel, ctx: ToolContext)` into a `Tool`.

    The name defaults to the function's name and the description to its docstring.
    `needs_approval` (True, or `check(args, ctx) -> bool` on the validated arguments) makes
    a call wait for a person's decision before it runs (docs/approvals.md).
    """

    def wrap(fn: ToolFunction[ArgsT]) -> Tool[ArgsT]:
        if not inspect.iscoroutinefunction(fn):
            raise TypeError(f"tool {fn.__name__!r} must be an async function")
        doc = inspect.getdoc(fn) or ""
        return Tool(
            name=name or fn.__name__,
            description=description or doc.split("\n\n")[0].strip() or fn.__name__,
            args_model=_args_model(fn),
            fn=fn,
            timeout=timeout,
            idempotent=idempotent,
            destructive=destructive,
            approval=needs_approval,
        )

    return wrap


def _args_model(fn: Callable[..., Any]) -> Any:
    params = list(inspect.signature(fn).parameters.values())
    if len(params) != 2:
        raise TypeError(f"tool {fn.__name__!r} must take (args, ctx)")
    try:
        annotation = typing.get_type_hints(fn).get(params[0].name)
    except (NameError, TypeError):
        annotation = params[0].annotation
    if not (isinstance(annotation, type) and issubclass(annotation, BaseModel)):
        raise TypeError(
            f"the first parameter of tool {fn.__name__!r} must be annotated with a pydantic "
            f"BaseModel subclass defined at module level (got {annotation!r})"
        )
    return annotation


@dataclass(frozen=True)
class ToolFailure:
    """What a tool returns (not raises) when it failed in a way it can describe: the service
    said no, the record does not exist. The run records `tool_end {ok: false, error:
    {message, retryable, value?}}`, the page shows it as a failure and the model sees it as
    an error result, so it can retry (`retryable`) or tell the person."""

    message: str
    value: Any = None
    """Anything JSON-ready that helps: the upstream status, the id that was not found."""
    retryable: bool = False

    def to_error(self) -> dict[str, Any]:
        error: dict[str, Any] = {"message": self.message, "retryable": self.retryable}
        if self.value is not None:
            error["value"] = _jsonable(self.value)
        return error


@dataclass(frozen=True)
class ToolResult:
    """The outcome of one call. `result` is JSON-ready when ok; `error` says why not: a line
    of text, or a tool's own `ToolFailure` as `{message, retryable, value?}`."""

    ok: bool
    result: Any | None
    error: str | dict[str, Any] | None
    duration_ms: int
    interrupted: bool = False

    @classmethod
    def failure(cls, error: str, duration_ms: int, *, interrupted: bool = False) -> ToolResult:
        return cls(False, None, error, duration_ms, interrupted)

    def ended(self, call_id: str) -> ToolEnd:
        """The `tool_end` event of call `call_id`: a result when ok, else an error."""
        return ToolEnd(call_id=call_id, ok=self.ok, duration_ms=self.duration_ms,
                       result=self.result if self.ok else UNSET,
                       error=UNSET if self.ok else self.error, interrupted=self.interrupted)

    def to_dict(self) -> dict[str, Any]:
        """The `tool_end` data without `call_id`: what a `tool_result` entry records."""
        data = self.ended("").data()
        del data["call_id"]
        return data

    def model_text(self) -> str:
        """What the model is shown: the JSON result, or `{"error": ...}` on failure."""
        if self.ok:
            return json.dumps(self.result, ensure_ascii=False)
        return json.dumps({"error": self.error}, ensure_ascii=False)


class ToolRegistry:
    """The tools one agent may call, and the single place they are run."""

    def __init__(self, tools: Iterable[ToolDefinition] = ()) -> None:
        self._tools: dict[str, ToolDefinition] = {}
        for t in tools:
            self.add(t)

    def add(self, t: ToolDefinition) -> ToolDefinition:
        if t.name in self._tools:
            raise ValueError(f"tool {t.name!r} is already registered")
        self._tools[t.name] = t
        return t

    def get(self, name: str) -> ToolDefinition | None:
        return self._tools.get(name)

    def is_idempotent(self, name: str) -> bool:
        """Resume planning asks this: only idempotent tools are re-run after a crash."""
        t = self._tools.get(name)
        return t is not None and t.idempotent

    def needs_approval(self, call: ToolCall, ctx: ToolContext) -> bool:
        """Whether `call` must wait for a person; an unknown tool fails without running."""
        t = self._tools.get(call.name)
        return t is not None and t.needs_approval(call.arguments, ctx)

    def names(self) -> list[str]:
        return list(self._tools)

    def specs(self) -> list[ToolSpec]:
        return [t.spec() for t in self._tools.values()]

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __iter__(self) -> Iterator[ToolDefinition]:
        return iter(self._tools.values())

    def __len__(self) -> int:
        return len(self._tools)

    async def run(self, call: ToolCall, ctx: ToolContext) -> ToolResult:
        """Validate, run under the tool's timeout, and capture the outcome.

        Never raises for tool failures; raises `CancelledError` when the calling task is
        cancelled (after cancelling the tool and letting it clean up).
        """
        started = time.monotonic()

        def elapsed() -> int:
            return int((time.monotonic() - started) * 1000)

        t = self._tools.get(call.name)
        if t is None:
            known = ", ".join(self._tools) or "none"
            return ToolResult.failure(f"unknown tool {call.name!r}; available: {known}", 0)
        try:
            bound = t.bind(call.arguments)
        except InvalidArguments as exc:
            return ToolResult.failure(str(exc), elapsed())
        if ctx.cancel.is_set():
            return ToolResult.failure("interrupted", elapsed(), interrupted=True)

        work = asyncio.create_task(bound(ctx), name=f"tool:{t.name}:{ctx.call_id}")
        if isinstance(ctx.cancel, CancelEvent):
            stopped = await race(work, ctx.cancel, t.timeout)
        else:
            stopped = await race_task(work, ctx.cancel, t.timeout)
        if stopped is not None:
            if stopped:
                return ToolResult.failure("interrupted", elapsed(), interrupted=True)
            return ToolResult.failure(f"timed out after {t.timeout:g}s", elapsed())
        if work.cancelled():
            return ToolResult.failure("CancelledError: the tool cancelled itself", elapsed())
        error = work.exception()
        if error is not None:
            log.info("tool %s failed: %r", t.name, error)
            return ToolResult.failure(f"{type(error).__name__}: {error}", elapsed())
        outcome = work.result()
        try:
            if isinstance(outcome, ToolFailure):
                return ToolResult(False, None, outcome.to_error(), elapsed())
            value = _jsonable(outcome)
        except (TypeError, ValueError) as err:
            return ToolResult.failure(
                f"TypeError: result of tool {t.name!r} is not JSON-serialisable: {err}", elapsed()
            )
        return ToolResult(True, value, None, elapsed())


def _jsonable(value: Any) -> Any:
    if isinstance(value, BaseModel):
        value = value.model_dump(mode="json")
    try:
        plain = to_jsonable_python(value)
    except Exception as err:  # pydantic raises its own serialisation error type
        raise TypeError(str(err)) from err
    json.dumps(plain, allow_nan=False)
    return plain


def _describe(name: str, exc: ValidationError) -> str:
    """One readable line per problem, e.g. `seconds: Input should be a valid number (got 'x')`."""
    problems = []
    for err in exc.errors(include_url=False):
        where = ".".join(str(p) for p in err["loc"]) or "arguments"
        text = f"{where}: {err['msg']}"
        if err["type"] != "missing":
            got = repr(err.get("input"))
            text += f" (got {got if len(got) <= 60 else got[:57] + '...'})"
        problems.append(text)
    return f"invalid arguments for tool {name!r}: " + "; ".join(problems)
