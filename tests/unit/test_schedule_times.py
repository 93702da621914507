"""Fire times, the pure part (domain/schedules.py; docs/schedules.md "Time zones"): the DST
rules on the days the clock changes in Europe/Berlin and America/New_York, `every`, and which
fires a pass due at `now` makes (late ones fire, missed ones follow catch_up)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from outlive.domain.errors import InvalidInput
from outlive.domain.schedules import (
    CatchUp,
    next_fire,
    parse_spec,
    plan_fires,
    prev_fire,
)
from outlive.providers._demo_script import plan_turn
from outlive.providers._port import Message, ToolSpec


def t(iso: str) -> int:
    return int(datetime.fromisoformat(iso).timestamp())


def utc(ts: int) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def fires(cron: str, tz: str, start: str, n: int) -> list[str]:
    spec = parse_spec(cron, None, tz, 0)
    out, at = [], t(start)
    for _ in range(n):
        nxt = next_fire(spec, at)
        assert nxt is not None
        out.append(utc(nxt))
        at = nxt
    return out


def test_spring_forward_a_skipped_time_fires_once_at_the_jump():
    # Berlin, 29 March 2026: 02:00 CET becomes 03:00 CEST; 02:30 does not exist
    assert fires("30 2 * * *", "Europe/Berlin", "2026-03-28T00:00:00+00:00", 3) == [
        "2026-03-28T01:30:00Z", "2026-03-29T01:00:00Z", "2026-03-30T00:30:00Z"]
    # New York, 8 March 2026: 02:00 EST becomes 03:00 EDT
    assert fires("30 2 * * *", "America/New_York", "2026-03-07T00:00:00+00:00", 3) == [
        "2026-03-07T07:30:00Z", "2026-03-08T07:00:00Z", "2026-03-09T06:30:00Z"]


def test_spring_forward_several_skipped_times_are_one_fire():
    assert fires("*/15 * * * *", "Europe/Berlin", "2026-03-29T00:40:00+00:00", 3) == [
        "2026-03-29T00:45:00Z", "2026-03-29T01:00:00Z", "2026-03-29T01:15:00Z"]


def test_fall_back_a_time_that_happens_twice_fires_once_at_its_first_occurrence():
    # Berlin, 25 October 2026: 03:00 CEST becomes 02:00 CET; 02:30 happens twice
    assert fires("30 2 * * *", "Europe/Berlin", "2026-10-24T12:00:00+00:00", 2) == [
        "2026-10-25T00:30:00Z", "2026-10-26T01:30:00Z"]
    # New York, 1 November 2026: 02:00 EDT becomes 01:00 EST; 01:30 happens twice
    assert fires("30 1 * * *", "America/New_York", "2026-10-31T12:00:00+00:00", 2) == [
        "2026-11-01T05:30:00Z", "2026-11-02T06:30:00Z"]
    # and 02:30 there happens once, in standard time
    assert fires("30 2 * * *", "America/New_York", "2026-10-31T12:00:00+00:00", 1) == [
        "2026-11-01T07:30:00Z"]


def test_prev_fire_mirrors_next_fire_across_the_changes():
    for tz in ("Europe/Berlin", "America/New_York", "UTC"):
        spec = parse_spec("30 2 * * *", None, tz, 0)
        at = t("2026-03-01T00:00:00+00:00")
        for _ in range(250):
            nxt = next_fire(spec, at)
            assert nxt is not None and prev_fire(spec, nxt + 1) == nxt
            at = nxt


def test_every_counts_seconds_from_its_anchor():
    spec = parse_spec(None, 10, "Europe/Berlin", 1000)
    assert next_fire(spec, 0) == 1000 and next_fire(spec, 1000) == 1010
    assert next_fire(spec, 1005) == 1010 and prev_fire(spec, 1010) == 1000
    assert prev_fire(spec, 1000) is None


def test_late_fires_fire_and_missed_ones_follow_catch_up():
    spec = parse_spec(None, 10, "UTC", 0)
    late = plan_fires(spec, 100, 125.5, grace=60, catch_up=CatchUp.NONE, limit=10)
    assert (late.fires, late.next_at) == ([(100, False), (110, False), (120, False)], 130)
    one = plan_fires(spec, 100, 1000.2, grace=30, catch_up=CatchUp.ONE, limit=10)
    assert one.fires == [(970, True), (980, False), (990, False), (1000, False)]
    assert one.next_at == 1010
    none = plan_fires(spec, 100, 1000.2, grace=30, catch_up=CatchUp.NONE, limit=10)
    assert none.fires == [(980, False), (990, False), (1000, False)]
    capped = plan_fires(spec, 100, 125.5, grace=60, catch_up=CatchUp.ONE, limit=2)
    assert (capped.fires, capped.next_at) == ([(100, False), (110, False)], 120)
    assert plan_fires(spec, 130, 125.5, grace=60, catch_up=CatchUp.ONE, limit=9).fires == []


@pytest.mark.parametrize(("cron", "every", "tz"), [
    ("61 * * * *", None, "UTC"), ("* * *", None, "UTC"), ("0 0 30 2 *", None, "UTC"),
    ("* * * * * *", None, "UTC"), ("@never", None, "UTC"), (None, None, "UTC"),
    ("* * * * *", 5, "UTC"), (None, 0, "UTC"), (None, True, "UTC"), (None, 10**20, "UTC"),
    (None, 5, "Nowhere/City"), (None, 5, ""), (None, 5, "../../etc/passwd"),
    (None, 5, "Europe/Berlin\x00"), ("x" * 300, None, "UTC"),
])
def test_bad_specs_are_refused(cron, every, tz):
    with pytest.raises(InvalidInput):
        parse_spec(cron, every, tz, 0)


def test_remind_me_asks_for_a_wakeup_and_the_wakeup_continues_with_the_note():
    tools = [ToolSpec("schedule_wakeup", "wake", {"type": "object"})]
    first = plan_turn([Message("user", "remind me to stretch")], tools)
    (call,) = first.tool_calls
    assert call.name == "schedule_wakeup"
    assert call.arguments == {"in": 3, "note": "remind me to stretch"}
    woken = plan_turn([Message("user", "Wake-up: remind me to stretch")], tools)
    assert woken.tool_calls == [] and "I am back, as you asked" in woken.text
    assert "remind me to stretch" in woken.text
    without = plan_turn([Message("user", "remind me to stretch")], [])
    assert without.tool_calls == [] and "schedule_wakeup" in without.text
