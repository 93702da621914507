"""Prices (issue 31): the shipped table and its lookup, the exact cost of a call, prices from
the routes file and the environment, and the route registry's answer (configured, shipped,
free for the demo and local models, None when unknown)."""

from __future__ import annotations

from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from outlive.domain.prices import (
    FREE,
    PRICES,
    PRICES_READ_ON,
    Price,
    cost_usd,
    from_nano,
    lookup_price,
    parse_price,
    to_nano,
)
from outlive.domain.usage import call_record, ledger_call, usage_record
from outlive.providers import RouteConfigError, configured_registry, default_registry
from outlive.providers._config import load_routes


@pytest.mark.parametrize(("name", "key"), [
    ("gpt-4o", "gpt-4o"),
    ("gpt-4o-2024-08-06", "gpt-4o"),
    ("GPT-4o-mini", "gpt-4o-mini"),
    ("gpt-4o-mini-2024-07-18", "gpt-4o-mini"),
    ("openai/gpt-4.1", "gpt-4.1"),
    ("o4-mini-2025-04-16", "o4-mini"),
    ("gpt-5-nano", "gpt-5-nano"),
    ("claude-sonnet-4-20250514", "claude-sonnet-4"),
    ("claude-sonnet-4-0", "claude-sonnet-4"),
    ("claude-3-7-sonnet-latest", "claude-3-7-sonnet"),
    ("claude-3-5-haiku-20241022", "claude-3-5-haiku"),
    ("claude-opus-4-1-20250805", "claude-opus-4-1"),
    ("claude-haiku-4-5-20251001", "claude-haiku-4-5"),
    ("claude-sonnet-5-5", "claude-sonnet-5-5"),
    ("anthropic/claude-opus-5-5", "claude-opus-5-5"),
    ("claude-fable-5-1", "claude-fable-5-1"),
    ("gpt-5.1-2025-11-13", "gpt-5.1"),
])
def test_models_are_found_through_their_date_suffixes(name, key):
    assert lookup_price(name) is PRICES[key]


def test_a_dated_model_priced_apart_keeps_its_own_price():
    assert lookup_price("gpt-4o-2024-05-13") == Price.of(5, 5, 15)


@pytest.mark.parametrize("name", ["gpt-4o-audio-preview", "llama3.2", "gpt", "", "smollm2",
                                  "claude-sonnet", "gpt-4o-mini-tts"])
def test_unknown_models_have_no_price_never_a_neighbours(name):
    assert lookup_price(name) is None


@pytest.mark.parametrize(("name", "price"), [
    ("claude-sonnet-5-5", Price.of(2, "0.10", 10)),  # after the 2026-10-07 cache-hit cut
    ("claude-opus-5-5", Price.of(4, "0.20", 20)),
    ("claude-fable-5-1", Price.of(10, "0.25", 50)),
    ("claude-sonnet-5", Price.of(2, "0.20", 10)),
    ("claude-opus-4-8", Price.of(5, "0.50", 25)),
    ("gpt-5.1", Price.of("1.25", "0.125", 10)),
])
def test_newer_models_carry_the_vendors_list_prices(name, price):
    assert lookup_price(name) == price


@pytest.mark.parametrize("name", ["claude-haiku-5-5", "claude-haiku-5-5-20261007",
                                  "anthropic/claude-haiku-5-5"])
def test_a_model_priced_by_prompt_length_is_left_unpriced(name):
    # Haiku 5.5 bills by prompt length (<= / > 100k tokens): one flat price would be a guess.
    assert "claude-haiku-5-5" not in PRICES
    assert lookup_price(name) is None
    assert cost_usd(1000, 100, 0, lookup_price(name)) is None


def test_the_table_says_when_it_was_read():
    assert PRICES_READ_ON == "2026-12-02"
    assert all(p.cached_input <= p.input for p in PRICES.values())


def test_cost_bills_cached_input_at_its_rate_and_none_without_a_price():
    price = Price.of("2.50", "1.25", "10")
    # 1,000 fresh at 2.50, 3,000 cached at 1.25, 500 out at 10: per million
    assert cost_usd(4000, 500, 3000, price) == Decimal("0.01125")
    assert cost_usd(4000, 500, 3000, None) is None
    assert cost_usd(10, 10, 0, FREE) == 0
    assert cost_usd(10, 0, 50, price) == cost_usd(10, 0, 10, price)  # cached <= input


@given(st.integers(0, 10**9), st.integers(0, 10**9), st.integers(0, 10**9),
       st.sampled_from(sorted(PRICES)))
def test_shipped_costs_are_exact_in_nano_dollars(inp, out, cached, model):
    cost = cost_usd(inp, out, cached, PRICES[model])
    assert cost is not None
    assert from_nano(to_nano(cost)) == cost  # three decimals per million: exact at 10^-9


def test_nano_dollars_read_back_without_trailing_zeros():
    assert str(from_nano(1_230_000)) == "0.00123"
    assert str(from_nano(2_000_000_000)) == "2"
    assert str(from_nano(0)) == "0"
    assert to_nano(Decimal("0.0000000004")) == 0 and to_nano(Decimal("0.0000000005")) == 1


@pytest.mark.parametrize("bad", [{"input": 1}, {"input": 1, "output": -2},
                                 {"input": "x", "output": 1}, {"input": 1, "output": 1, "k": 2},
                                 "1", "1,2,3,4", 7, {"input": True, "output": 1},
                                 {"input": "nan", "output": 1}])
def test_bad_prices_are_refused(bad):
    with pytest.raises(ValueError, match="price"):
        parse_price(bad)


def test_prices_parse_from_a_table_or_text():
    assert parse_price({"input": 2.5, "cached_input": 1.25, "output": 10}) == Price.of(
        "2.5", "1.25", "10")
    assert parse_price("0.5, 2") == Price.of("0.5", "0.5", "2")
    assert parse_price("1,0.1,4") == Price.of(1, "0.1", 4)


def test_the_registry_prices_demo_and_local_at_nothing_and_unknowns_at_none(tmp_path):
    registry = configured_registry(environ={})
    assert registry.price("demo:scripted") == FREE
    assert registry.price("local:smollm2") == FREE
    assert registry.price("openai:gpt-4o") is PRICES["gpt-4o"]
    assert registry.price("anthropic:claude-sonnet-4-20250514") is PRICES["claude-sonnet-4"]
    assert registry.price("openai:my-fine-tune") is None
    assert registry.price("not a route") is None
    assert default_registry().price("demo:x") == FREE


def test_a_routes_file_and_the_environment_override_the_table(tmp_path):
    path = tmp_path / "routes.toml"
    path.write_text('[routes.openai]\nprice = {input = 3, cached_input = 1.5, output = 12}\n'
                    '[routes.ollama]\nbase_url = "http://127.0.0.1:11434/v1"\n'
                    '[routes.demo]\nprice = {input = 1, output = 1}\n')
    env = {"OUTLIVE_ROUTE_OLLAMA_PRICE": "0.1,0.05,0.2"}
    registry = configured_registry(environ=env, routes_file=str(path))
    assert registry.price("openai:gpt-4o") == Price.of(3, "1.5", 12)
    assert registry.price("openai:anything") == Price.of(3, "1.5", 12)
    assert registry.price("ollama:llama3.2") == Price.of("0.1", "0.05", "0.2")
    assert registry.price("demo:scripted") == Price.of(1, 1, 1)
    assert registry.price("anthropic:claude-3-5-haiku") is PRICES["claude-3-5-haiku"]


def test_a_bad_price_in_the_routes_file_fails_at_startup(tmp_path):
    path = tmp_path / "routes.toml"
    path.write_text('[routes.openai]\nprice = {input = "cheap", output = 1}\n')
    with pytest.raises(RouteConfigError, match="price of 'openai:'"):
        load_routes(environ={}, routes_file=str(path))
    with pytest.raises(RouteConfigError, match="price"):
        load_routes(environ={"OUTLIVE_ROUTE_OPENAI_PRICE": "1"})


def test_an_entry_describes_its_ledger_row():
    data = {"usage": usage_record(100, 20, 80, 5),
            "call": call_record(route="openai:o3", model="o3", attempt=2, index=3,
                                latency_ms=1500, cost=Decimal("0.00036"), estimated=False)}
    row = ledger_call("assistant", data)
    assert row is not None
    assert (row.kind, row.route, row.attempt, row.index, row.input_tokens, row.output_tokens,
            row.cached_input_tokens, row.reasoning_tokens, row.latency_ms,
            row.cost_nano_usd, row.estimated) == (
        "model", "openai:o3", 2, 3, 100, 20, 80, 5, 1500, 360_000, False)
    assert ledger_call("summary", data) is not None and ledger_call("summary", data).kind == (
        "summary")
    assert ledger_call("tool_result", data) is None
    assert ledger_call("assistant", {"usage": data["usage"]}) is None
    odd = ledger_call("assistant", {"call": {"cost_usd": "lots", "index": "x"},
                                    "usage": {"input_tokens": -4, "estimated": True}})
    assert odd is not None
    assert (odd.cost_nano_usd, odd.index, odd.input_tokens, odd.estimated) == (None, 0, 0, True)
