"""Session budgets: parsing what owners send, and which limit totals have reached."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import pytest

from outlive.domain.budget import (
    Budget,
    OwnerBudget,
    month_of,
    parse_budget,
    parse_owner_budget,
    plus,
    reached,
    run_tool_calls,
)
from outlive.domain.errors import InvalidInput
from outlive.domain.usage import UsageTotals


def test_parse_round_trips_and_null_is_none() -> None:
    budget = parse_budget({"max_cost_usd": "0.50", "max_tokens": 1000, "max_model_calls": 3})
    assert budget == Budget(max_cost_usd=Decimal("0.50"), max_tokens=1000, max_model_calls=3)
    assert parse_budget(budget.to_dict() if budget else None) == budget
    assert parse_budget(None) is None
    assert parse_budget({}) == Budget()


@pytest.mark.parametrize("value, words", [
    ({"max_calls": 1}, "unknown budget key(s) max_calls"),
    ({"max_tokens": -1}, "max_tokens must be a non-negative integer"),
    ({"max_model_calls": 1.5}, "max_model_calls must be a non-negative integer"),
    ({"max_tool_calls": True}, "max_tool_calls must be a non-negative integer"),
    ({"max_cost_usd": "-0.1"}, "max_cost_usd must be a non-negative decimal"),
    ({"max_cost_usd": "lots"}, "max_cost_usd must be a non-negative decimal"),
    ({"max_cost_usd": "Infinity"}, "max_cost_usd must be a non-negative decimal"),
    ([1], "budget must be an object or null"),
])
def test_bad_budgets_say_what_is_allowed(value: Any, words: str) -> None:
    with pytest.raises(InvalidInput) as err:
        parse_budget(value)
    assert words in str(err.value)
    assert "max_model_calls" in str(err.value)


def test_reached_names_the_first_limit_at_or_over_its_cap() -> None:
    totals = UsageTotals(model_calls=2, tool_calls=1, input_tokens=60, output_tokens=40,
                         cost_usd=Decimal("0.10"), unpriced_calls=1)
    assert reached(None, totals) is None
    assert reached(Budget(), totals) is None
    assert reached(Budget(max_tokens=101), totals) is None
    assert reached(Budget(max_tokens=100), totals) == "max_tokens"
    assert reached(Budget(max_model_calls=3), totals) is None
    assert reached(Budget(max_model_calls=2), totals) == "max_model_calls"
    assert reached(Budget(max_tool_calls=1), totals) == "max_tool_calls"
    assert reached(Budget(max_cost_usd=Decimal("0.11")), totals) is None
    assert reached(Budget(max_cost_usd=Decimal("0.10"), max_tokens=1), totals) == "max_cost_usd"
    assert reached(Budget(max_model_calls=0), UsageTotals()) == "max_model_calls"


def test_an_agents_file_sets_a_default_budget_and_refuses_a_bad_one(tmp_path) -> None:
    from outlive.runtime import AgentRegistry
    from outlive.runtime.agent_file import load_agents_file

    path = tmp_path / "agents.toml"
    path.write_text('[agents.capped]\nsystem_prompt = "s"\n'
                    'budget = {max_model_calls = 20, max_cost_usd = "0.5"}\n')
    registry = AgentRegistry()
    load_agents_file(path, registry)
    assert registry.get("capped").budget == Budget(max_model_calls=20,
                                                   max_cost_usd=Decimal("0.5"))
    path.write_text('[agents.x]\nsystem_prompt = "s"\nbudget = {max_calls = 1}\n')
    with pytest.raises(InvalidInput, match=r"agents\.x: unknown budget key"):
        load_agents_file(path, AgentRegistry())


def test_with_entries_counts_as_the_ledger_counts() -> None:
    from outlive.domain.budget import with_entries
    from outlive.domain.usage import call_record, usage_record

    answer = {"usage": usage_record(10, 5),
              "call": call_record(route="r:m", model="m", attempt=1, index=0, latency_ms=1,
                                  cost=Decimal("0.01"), estimated=False)}
    unpriced = {**answer, "call": {**answer["call"], "cost_usd": None}}
    got = with_entries(UsageTotals(model_calls=1, input_tokens=3),
                       [("user", {"text": "hi"}), ("assistant", answer),
                        ("tool_result", {}), ("assistant", unpriced)])
    assert got == UsageTotals(model_calls=3, tool_calls=1, input_tokens=23, output_tokens=10,
                              cost_usd=Decimal("0.01"), unpriced_calls=1)


def test_the_per_run_tool_cap_counts_tool_results_since_the_last_message() -> None:
    kinds = ["user", "assistant", "tool_result", "tool_result", "assistant", "user",
             "assistant", "tool_result", "summary", "assistant", "tool_result"]
    assert run_tool_calls(kinds) == 2
    assert run_tool_calls([]) == 0
    assert run_tool_calls(["tool_result"]) == 1
    cap = Budget(max_tool_calls_per_run=2)
    assert reached(cap, UsageTotals(tool_calls=99), run_tool_calls(kinds)) == (
        "max_tool_calls_per_run")
    assert reached(cap, UsageTotals(tool_calls=99), 1) is None
    assert reached(cap, UsageTotals(tool_calls=99)) is None  # the store's check: totals only
    assert parse_budget({"max_tool_calls_per_run": 5}) == Budget(max_tool_calls_per_run=5)


def test_an_owner_budget_has_the_ledgers_limits_only() -> None:
    assert parse_owner_budget({"max_cost_usd": 5, "max_model_calls": 9}) == Budget(
        max_cost_usd=Decimal(5), max_model_calls=9)
    assert parse_owner_budget(None) is None
    for key in ("max_tool_calls", "max_tool_calls_per_run", "max_dollars"):
        with pytest.raises(InvalidInput, match=f"owner budget has no {key}"):
            parse_owner_budget({key: 1})
    with pytest.raises(InvalidInput, match="object or null"):
        parse_owner_budget([1])
    assert Budget(max_tokens=3, max_tool_calls=4).owner_dict() == {
        "max_cost_usd": None, "max_tokens": 3, "max_model_calls": None}


def test_an_owner_month_counts_what_is_held_beside_what_was_used() -> None:
    used = UsageTotals(model_calls=2, input_tokens=500, output_tokens=100,
                       cost_usd=Decimal("0.4"))
    held = UsageTotals(model_calls=1, input_tokens=400, cost_usd=Decimal("0.2"))
    assert plus(used, held) == UsageTotals(model_calls=3, input_tokens=900, output_tokens=100,
                                           cost_usd=Decimal("0.6"))
    assert OwnerBudget(Budget(max_tokens=1000), "2026-12", used, held).reached() == "max_tokens"
    assert OwnerBudget(Budget(max_tokens=1001), "2026-12", used, held).reached() is None
    assert OwnerBudget(Budget(max_cost_usd=Decimal("0.5")), "2026-12", used).reached() is None
    assert OwnerBudget(None, "2026-12", used, held).reached() is None


def test_a_month_is_the_utc_calendar_month() -> None:
    assert month_of(datetime(2026, 12, 31, 23, 59, tzinfo=UTC)) == (
        datetime(2026, 12, 1, tzinfo=UTC), datetime(2027, 1, 1, tzinfo=UTC))
    assert month_of(datetime(2026, 2, 1, tzinfo=UTC)) == (
        datetime(2026, 2, 1, tzinfo=UTC), datetime(2026, 3, 1, tzinfo=UTC))
