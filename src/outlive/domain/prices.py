"""Model prices and the cost of a call (docs/usage.md).

Pure: a shipped table of public list prices for well-known models (USD per million tokens,
read on `PRICES_READ_ON`, so they may be out of date: a route's `price` in the routes file
overrides them), a lookup by model name that sees through date suffixes, and the cost of a
call's usage. An unknown price is None, and a call without one costs None: never a guess.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal, InvalidOperation
from typing import Any

__all__ = [
    "FREE",
    "PRICES",
    "PRICES_READ_ON",
    "Price",
    "cost_usd",
    "from_nano",
    "lookup_price",
    "parse_price",
    "to_nano",
]

PRICES_READ_ON = "2026-12-02"
"""The date of the vendors' public list prices the table holds (check them against the
vendors' pages before relying on a cost: a route's `price` overrides the table)."""

_MILLION = Decimal(1_000_000)
_NANO = Decimal("1e-9")


@dataclass(frozen=True)
class Price:
    """USD per million tokens: fresh input, input read from the provider's prompt cache, and
    output (reasoning tokens are output tokens, billed as such)."""

    input: Decimal
    cached_input: Decimal
    output: Decimal

    @classmethod
    def of(cls, input: float | str | Decimal, cached_input: float | str | Decimal | None,
           output: float | str | Decimal) -> Price:
        """A price from numbers as people write them; no cached rate: the input rate."""
        fresh = _decimal(input)
        cached = fresh if cached_input is None else _decimal(cached_input)
        return cls(fresh, cached, _decimal(output))

    def to_dict(self) -> dict[str, str]:
        return {"input": str(self.input), "cached_input": str(self.cached_input),
                "output": str(self.output)}


FREE = Price(Decimal(0), Decimal(0), Decimal(0))
"""The demo and local models: they run on the server, a known price of zero."""


def _decimal(value: float | str | Decimal) -> Decimal:
    if isinstance(value, bool):
        raise ValueError("a price is a number of USD per million tokens")
    try:
        out = value if isinstance(value, Decimal) else Decimal(str(value))
    except InvalidOperation:
        raise ValueError(f"{value!r} is not a price (USD per million tokens)") from None
    if not out.is_finite() or out < 0:
        raise ValueError(f"{value!r} is not a price (USD per million tokens)")
    return out


def parse_price(value: Any) -> Price:
    """A price from a routes file table `{input, cached_input?, output}` or the text
    `input,cached_input,output` (`input,output` leaves the cached rate at the input's);
    raises ValueError on anything else."""
    if isinstance(value, str):
        parts = [p.strip() for p in value.split(",")]
        if len(parts) == 2:
            return Price.of(parts[0], None, parts[1])
        if len(parts) == 3:
            return Price.of(parts[0], parts[1], parts[2])
        raise ValueError("a price is 'input,cached_input,output' in USD per million tokens")
    if not isinstance(value, dict):
        raise ValueError("a price is a table {input, cached_input, output}")
    unknown = set(value) - {"input", "cached_input", "output"}
    if unknown or "input" not in value or "output" not in value:
        raise ValueError("a price takes input, output and optionally cached_input "
                         "(USD per million tokens)")
    return Price.of(value["input"], value.get("cached_input"), value["output"])


def _p(fresh: str, cached: str, out: str) -> Price:
    return Price(Decimal(fresh), Decimal(cached), Decimal(out))


PRICES: dict[str, Price] = {
    # OpenAI (platform.openai.com/docs/pricing, now developers.openai.com/api/docs/pricing, and
    # the model pages developers.openai.com/api/docs/models/<id>), standard tier; read on
    # 2025-11-25 (gpt-5.1 on PRICES_READ_ON): newer OpenAI models are not in the table yet
    "gpt-4o": _p("2.50", "1.25", "10.00"),
    "gpt-4o-2024-05-13": _p("5.00", "5.00", "15.00"),
    "gpt-4o-mini": _p("0.15", "0.075", "0.60"),
    "gpt-4.1": _p("2.00", "0.50", "8.00"),
    "gpt-4.1-mini": _p("0.40", "0.10", "1.60"),
    "gpt-4.1-nano": _p("0.10", "0.025", "0.40"),
    "gpt-5": _p("1.25", "0.125", "10.00"),
    "gpt-5-mini": _p("0.25", "0.025", "2.00"),
    "gpt-5-nano": _p("0.05", "0.005", "0.40"),
    "gpt-5.1": _p("1.25", "0.125", "10.00"),
    "o1": _p("15.00", "7.50", "60.00"),
    "o3": _p("2.00", "0.50", "8.00"),
    "o3-mini": _p("1.10", "0.55", "4.40"),
    "o4-mini": _p("1.10", "0.275", "4.40"),
    # Anthropic (platform.claude.com/docs/en/about-claude/pricing and the model overviews
    # platform.claude.com/docs/en/models/<model>/overview): cached input is "cache hits and
    # refreshes". Not here, so unpriced (tokens only): claude-haiku-5-5, priced by prompt
    # length ($0.10 in / $0.50 out up to 100,000 prompt tokens, five times that above), which
    # one flat Price cannot state; claude-fable-5-2, whose cache-hit rate the vendor's pages
    # read here did not give; the Mythos models (by invitation, ids not confirmed).
    "claude-fable-5-1": _p("10.00", "0.25", "50.00"),
    "claude-fable-5": _p("10.00", "1.00", "50.00"),
    "claude-opus-5-5": _p("4.00", "0.20", "20.00"),
    "claude-opus-5": _p("5.00", "0.50", "25.00"),
    "claude-opus-4-8": _p("5.00", "0.50", "25.00"),
    "claude-opus-4-7": _p("5.00", "0.50", "25.00"),
    "claude-opus-4-6": _p("5.00", "0.50", "25.00"),
    "claude-opus-4-5": _p("5.00", "0.50", "25.00"),
    "claude-opus-4-1": _p("15.00", "1.50", "75.00"),
    "claude-opus-4": _p("15.00", "1.50", "75.00"),
    "claude-3-opus": _p("15.00", "1.50", "75.00"),
    "claude-sonnet-5-5": _p("2.00", "0.10", "10.00"),  # cache hits cut from 0.20 on 2026-10-07
    "claude-sonnet-5": _p("2.00", "0.20", "10.00"),
    "claude-sonnet-4-6": _p("3.00", "0.30", "15.00"),
    # Sonnet 4 / 4.5 bill more past 200K input tokens only with the 1M-context beta header,
    # which outlive does not send: without it such a prompt is refused, so the rate is flat.
    "claude-sonnet-4-5": _p("3.00", "0.30", "15.00"),
    "claude-sonnet-4": _p("3.00", "0.30", "15.00"),
    "claude-3-7-sonnet": _p("3.00", "0.30", "15.00"),
    "claude-3-5-sonnet": _p("3.00", "0.30", "15.00"),  # retired; its last listed price
    "claude-haiku-4-5": _p("1.00", "0.10", "5.00"),
    "claude-3-5-haiku": _p("0.80", "0.08", "4.00"),
    "claude-3-haiku": _p("0.25", "0.03", "1.25"),
}
"""The shipped table, by model name without its date suffix."""

_ALIASES = {"claude-sonnet-4-0": "claude-sonnet-4", "claude-opus-4-0": "claude-opus-4"}
_SUFFIX = re.compile(r"-(?:\d{4}-\d{2}-\d{2}|\d{8}|latest)$")


def lookup_price(model: str) -> Price | None:
    """The shipped price of `model`, or None. The name is matched whole (case aside) after
    dropping a vendor path (`openai/gpt-4o`) and a date or `-latest` suffix
    (`claude-sonnet-4-20250514` is `claude-sonnet-4`, `gpt-4o-2024-08-06` is `gpt-4o`); a
    dated name the vendor priced apart is in the table as itself. Never a prefix of another
    model (`gpt-4o-audio-preview` is not `gpt-4o`): an unknown model has no price."""
    name = model.strip().lower().rsplit("/", 1)[-1]
    if name in PRICES:
        return PRICES[name]
    base = _SUFFIX.sub("", name)
    base = _ALIASES.get(base, base)
    return PRICES.get(base)


def cost_usd(input_tokens: int, output_tokens: int, cached_input_tokens: int,
             price: Price | None) -> Decimal | None:
    """What a call cost in USD, exactly: `input_tokens` counts the cached ones too (as the
    providers report it), which are billed at the cached rate. None without a price."""
    if price is None:
        return None
    cached = max(0, min(cached_input_tokens, input_tokens))
    fresh = max(0, input_tokens - cached)
    total = (fresh * price.input + cached * price.cached_input
             + max(0, output_tokens) * price.output)
    return total / _MILLION


def to_nano(usd: Decimal) -> int:
    """USD as an integer of 10^-9 USD, how the ledger stores it (exact for prices with up to
    three decimals; rounded half up past that)."""
    return int((usd / _NANO).quantize(Decimal(1), rounding=ROUND_HALF_UP))


def from_nano(nano: int) -> Decimal:
    """The ledger's integer of 10^-9 USD as USD, without trailing zeros."""
    out = (Decimal(int(nano)) * _NANO).normalize()
    return out.quantize(Decimal(1)) if out == out.to_integral() else out
