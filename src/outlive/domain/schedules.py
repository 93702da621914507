"""Time, the pure part (docs/schedules.md): schedule specs, their fire times, and which fires a
pass due at `now` makes. No clock is read here: every function takes the time it reasons about.

Fire times are whole Unix seconds, since a fire is identified by (schedule, fire time). A cron
expression is read in its time zone's wall time and each matching wall time becomes an instant
by two rules for the days the clock changes:

* a wall time that does not exist (spring forward: 02:30 on the day the clock jumps from 02:00
  to 03:00) fires once, at the first valid instant after it: the instant of the jump (03:00);
  several such times (every 15 minutes of the skipped hour) are that one fire;
* a wall time that happens twice (fall back: 02:30 on the day the clock goes from 03:00 back
  to 02:00) fires once, at its first occurrence (the earlier instant, PEP 495's `fold=0`).

An `every` schedule is plain seconds from its anchor, the same in any time zone.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import CroniterError, croniter  # type: ignore[import-untyped]

from .errors import InvalidInput

__all__ = [
    "MAX_EVERY",
    "MIN_EVERY",
    "WAKEUP_PREFIX",
    "CatchUp",
    "FirePlan",
    "Overlap",
    "ScheduleSpec",
    "next_fire",
    "parse_spec",
    "plan_fires",
    "prev_fire",
]

WAKEUP_PREFIX = "Wake-up: "
"""The start of a wake-up's message: the rest is the note the session asked to be woken with."""
MIN_EVERY = 1
MAX_EVERY = 366 * 86400
_MAX_CRON = 200
_LOOKAHEAD_YEARS = 5
"""A cron expression with no fire in this many years (`0 0 30 2 *`) is refused."""
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


class Overlap(enum.StrEnum):
    """What a fire does while the previous fire's run still runs."""

    SKIP = "skip"
    QUEUE = "queue"


class CatchUp(enum.StrEnum):
    """What fires missed while no worker ran (older than the grace) become."""

    ONE = "one"
    NONE = "none"


@dataclass(frozen=True)
class ScheduleSpec:
    cron: str | None
    every: int | None
    timezone: str
    anchor: int
    """`every`: fires are anchor + k * every; cron: unused."""


def _zone(name: str) -> ZoneInfo:
    if not isinstance(name, str) or not 0 < len(name) <= 64 or "\0" in name or ".." in name:
        raise InvalidInput("timezone must be an IANA time zone name such as Europe/Berlin")
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        raise InvalidInput(f"unknown timezone {name!r}") from None


def parse_spec(cron: str | None, every: int | None, timezone: str, anchor: int) -> ScheduleSpec:
    """A checked spec: exactly one of a five-field cron expression (or `@daily`-style) and a
    whole number of seconds; raises `InvalidInput` saying what is wrong."""
    _zone(timezone)
    if (cron is None) == (every is None):
        raise InvalidInput("give exactly one of cron and every")
    if every is not None:
        if isinstance(every, bool) or not isinstance(every, int) \
                or not MIN_EVERY <= every <= MAX_EVERY:
            raise InvalidInput(f"every is a whole number of seconds, {MIN_EVERY} to {MAX_EVERY}")
        return ScheduleSpec(None, every, timezone, int(anchor))
    assert cron is not None
    text = " ".join(cron.split()) if isinstance(cron, str) else ""
    fields = text.split(" ")
    if not text or len(text) > _MAX_CRON or "\0" in text or (
            len(fields) != 5 and not (len(fields) == 1 and text.startswith("@"))):
        raise InvalidInput("cron is five fields (minute hour day month weekday) or @daily etc.")
    spec = ScheduleSpec(text, None, timezone, int(anchor))
    try:
        if not croniter.is_valid(text):
            raise InvalidInput(f"cron expression {cron!r} is not valid")
        if next_fire(spec, int(anchor)) is None:
            raise InvalidInput(f"cron expression {cron!r} never fires")
    except (CroniterError, ValueError, KeyError, IndexError, OverflowError, TypeError):
        raise InvalidInput(f"cron expression {cron!r} is not valid") from None
    return spec


def _wall(t: int, zone: ZoneInfo) -> datetime:
    return datetime.fromtimestamp(t, UTC).astimezone(zone).replace(tzinfo=None)


def _epoch(d: datetime) -> int:
    return int((d - _EPOCH).total_seconds())


def instant(wall: datetime, zone: ZoneInfo) -> int:
    """The instant of a wall time by the two rules above (first occurrence; a skipped time is
    the jump's instant)."""
    first = wall.replace(tzinfo=zone, fold=0)
    t0 = _epoch(first.astimezone(UTC))
    if _wall(t0, zone) == wall:
        return t0  # exists (if it happens twice, fold=0 is the first occurrence)
    # In a gap: fold=1 reads it with the offset after the jump (an instant before the jump),
    # fold=0 with the offset before it (an instant after): the jump lies between.
    lo = _epoch(wall.replace(tzinfo=zone, fold=1).astimezone(UTC))
    hi = t0
    lo, hi = min(lo, hi), max(lo, hi)
    while hi - lo > 1:  # the first instant whose wall time is past `wall`
        mid = (lo + hi) // 2
        if _wall(mid, zone) > wall:
            hi = mid
        else:
            lo = mid
    return hi


def next_fire(spec: ScheduleSpec, after: int) -> int | None:
    """The first fire time strictly after `after` (None: none within five years)."""
    if spec.every is not None:
        if after < spec.anchor:
            return spec.anchor
        return spec.anchor + ((after - spec.anchor) // spec.every + 1) * spec.every
    zone = _zone(spec.timezone)
    it = croniter(spec.cron, _wall(after, zone), max_years_between_matches=_LOOKAHEAD_YEARS)
    limit = after + _LOOKAHEAD_YEARS * 366 * 86400
    for _ in range(10_000):
        try:
            wall = it.get_next(datetime)
        except CroniterError:
            return None
        t = instant(wall, zone)
        if t > after:
            return t
        if t > limit:  # pragma: no cover - croniter stops first
            return None
    return None  # pragma: no cover - a wall time always passes `after` within a few steps


def prev_fire(spec: ScheduleSpec, before: int) -> int | None:
    """The last fire time strictly before `before` (None: none)."""
    if spec.every is not None:
        if before <= spec.anchor:
            return None
        return spec.anchor + ((before - 1 - spec.anchor) // spec.every) * spec.every
    zone = _zone(spec.timezone)
    it = croniter(spec.cron, _wall(before, zone) + timedelta(seconds=1),
                  max_years_between_matches=_LOOKAHEAD_YEARS)
    for _ in range(10_000):
        try:
            wall = it.get_prev(datetime)
        except CroniterError:
            return None
        t = instant(wall, zone)
        if t < before:
            return t
    return None  # pragma: no cover


@dataclass(frozen=True)
class FirePlan:
    fires: list[tuple[int, bool]]
    """(fire time, caught up): the fires this pass makes, oldest first."""
    next_at: int | None
    """The first fire time left for a later pass."""


def plan_fires(spec: ScheduleSpec, next_at: int, now: float, *, grace: float,
               catch_up: CatchUp, limit: int) -> FirePlan:
    """The fires due at `now` from `next_at` (the first fire not yet handled), at most `limit`.

    A fire due less than `grace` seconds ago is late and fires (a busy or restarting worker
    delays it, never drops it); older ones were missed while no worker ran: `catch_up` `one`
    makes the newest of them one fire (marked caught up), `none` drops them."""
    now_s = math.floor(now)
    horizon = math.ceil(now - grace)
    fires: list[tuple[int, bool]] = []
    cursor: int | None = next_at
    if next_at < horizon:
        if catch_up is CatchUp.ONE:
            missed = prev_fire(spec, horizon)
            if missed is not None and missed >= next_at:
                fires.append((missed, True))
        cursor = next_fire(spec, horizon - 1)
    while cursor is not None and cursor <= now_s and len(fires) < max(1, limit):
        fires.append((cursor, False))
        cursor = next_fire(spec, cursor)
    return FirePlan(fires, cursor)
