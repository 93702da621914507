"""The event loop a worker runs on: asyncio's own, or uvloop on request (`--loop uvloop`,
the `fast` extra; `auto` takes it when installed).

A worker streaming a thousand sessions spends part of its CPU in the event loop's own
bookkeeping (timers, callbacks, socket readiness), which uvloop does in C. It is not the
default: on the streaming-scale bench it made no difference that the noise did not swamp,
and a shutdown test (SIGTERM parks the run) failed with it intermittently, not yet explained.
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
