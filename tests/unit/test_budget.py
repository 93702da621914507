"""Session budgets: parsing what owners send, and which limit totals have reached."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest

from outlive.domain.budget import Budget, parse_budget, reached
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
