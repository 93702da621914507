"""Garbage collection sized for a long-running server process (`outlive serve`, `outlive
worker`).

CPython's default thresholds (700, 10, 10) run a young collection every 700 allocations and
promote whatever is alive at that instant, so a process streaming to a thousand clients
promotes objects that die a moment later, and every time the promoted count reaches a quarter
of the old generation it runs a full collection. With a thousand SSE streams open the API
held ~330,000 tracked objects, and each full collection took ~200 ms on a 2-core VM, found
nothing to free and held every stream's next frame back (bench/stream_bench.py: p99 190-240
ms in two runs of three). With young collections every 10,000 allocations and the middle one
every 50 of those, short-lived objects die before they are looked at: in the same runs no
full collection happened while the streams were open and p99 stayed at 13-16 ms, with the
same CPU per frame. Cycles are still collected; garbage in them just lives a little longer.
"""

from __future__ import annotations

import gc

__all__ = ["SERVER_THRESHOLDS", "tune_for_server"]

SERVER_THRESHOLDS = (10_000, 50, 10)
"""Allocations between young collections, young collections between middle ones, and middle
ones between looks at the old generation (which still waits for 25 % growth)."""


def tune_for_server() -> None:
    """Set the server thresholds for this process (once it serves, before its load)."""
    gc.set_threshold(*SERVER_THRESHOLDS)
