"""The event loop `outlive worker` and `outlive serve` run on: uvloop when it is installed
(`auto`, the default), else asyncio's own; `--loop asyncio` or `--loop uvloop` chooses.

A worker spends a sixth of its CPU in the event loop's own bookkeeping (timers, callbacks,
socket readiness), which uvloop does in C. Draining a backlog of 4,000 demo sessions with two
workers at speed 0 (nine interleaved pairs on the shared 2-core machine), uvloop took 2.24 ms
of worker CPU per session against asyncio's 2.53 (medians; minimums 1.80 and 2.12) and
drained 350 sessions/s against 298; `bench/runtime_bench.py --only throughput --workers 2`
gave 562, 456 and 1,368 turns/s against 413, 413 and 646 (three pairs, the load varying).
It is a dependency everywhere it builds (not Windows). A shutdown test once failed with it;
the cause was the test (its run could end before the SIGTERM), on either loop.
"""

from __future__ import annotations

import asyncio
import importlib
from collections.abc import Callable, Coroutine
from typing import Any, Literal, TypeVar, cast

__all__ = ["LOOPS", "loop_factory", "run"]

T = TypeVar("T")

LoopName = Literal["auto", "asyncio", "uvloop"]
LOOPS: tuple[LoopName, ...] = ("auto", "asyncio", "uvloop")

Factory = Callable[[], asyncio.AbstractEventLoop]


def loop_factory(name: str) -> tuple[str, Factory | None]:
    """The loop `name` asks for, and its factory (None: asyncio's default). `auto` is
    uvloop if it can be imported; `uvloop` when it cannot raises ValueError."""
    if name not in LOOPS:
        raise ValueError(f"unknown event loop {name!r} (choose from {', '.join(LOOPS)})")
    if name == "asyncio":
        return "asyncio", None
    try:
        module = importlib.import_module("uvloop")
    except ImportError:
        if name == "uvloop":
            raise ValueError(
                "uvloop is not installed (pip install 'outlive[fast]')") from None
        return "asyncio", None
    return "uvloop", cast(Factory, module.new_event_loop)


def run(main: Coroutine[Any, Any, T], factory: Factory | None) -> T:
    """`asyncio.run(main)` on the loop `factory` makes (asyncio's default when None)."""
    with asyncio.Runner(loop_factory=factory) as runner:
        return runner.run(main)
