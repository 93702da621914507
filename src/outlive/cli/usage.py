"""`outlive usage`: what the owner's model calls used and cost over a period, per group."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from ..client import UsageReport
from .options import ApiKeyOption, DbOption, KeyFileOption, UrlOption
from .sessions import api_client, run_call

__all__ = ["USAGE_COLUMNS", "usage"]

out = Console(markup=False, highlight=False)

USAGE_COLUMNS = ("key", "calls", "input", "cached", "output", "reasoning", "cost_usd",
                 "unpriced")
"""The table's columns: the group's key (day, model route, agent, session id or end user,
`(none)` for sessions without one), then its sums; `cost_usd` counts the priced calls only,
`unpriced` the others."""


def _rows(report: UsageReport) -> list[tuple[str, ...]]:
    rows = [("(none)" if g.key is None else g.key, g.model_calls, g.input_tokens,
             g.cached_input_tokens, g.output_tokens, g.reasoning_tokens, g.cost_usd,
             g.unpriced_calls) for g in report.groups]
    t = report.totals
    rows.append(("total", t.model_calls, t.input_tokens, t.cached_input_tokens,
                 t.output_tokens, t.reasoning_tokens, t.cost_usd, t.unpriced_calls))
    return [tuple(f"{v:,}" if isinstance(v, int) else str(v) for v in r) for r in rows]


def usage(
    group_by: Annotated[str, typer.Option(
        "--by", help="Group by day (UTC), model (route), agent, session or end_user.")] = "day",
    days: Annotated[int, typer.Option(
        min=1, help="The period: this many days up to now (unless --from is given).")] = 30,
    start: Annotated[str | None, typer.Option(
        "--from", help="Start of the period: a date (YYYY-MM-DD) or an RFC 3339 time.")
    ] = None,
    end: Annotated[str | None, typer.Option(
        "--to", help="End of the period, excluded; a date includes that day "
        "[default: now].")] = None,
    as_json: Annotated[bool, typer.Option(
        "--json", help="The report as the API gives it (GET /v1/usage), as JSON.")] = False,
    url: UrlOption = None, key: ApiKeyOption = None,
    db: DbOption = None, key_file: KeyFileOption = None,
) -> None:
    """Tokens and cost of your model calls over a period, per day, model, agent or session.
    A cost counts the calls whose price is known (docs/usage.md); `unpriced` the others."""
    if start is None and end is None:
        start = (datetime.now(UTC) - timedelta(days=days)).isoformat()

    async def go() -> None:
        async with api_client(url, key, db, key_file) as c:
            report = await c.usage(start=start, end=end, group_by=group_by)
        if as_json:
            typer.echo(json.dumps(report.model_dump(mode="json", by_alias=True), indent=1))
            return
        rows = _rows(report)
        period = f"{report.start:%Y-%m-%d %H:%M} to {report.end:%Y-%m-%d %H:%M} UTC"
        if not out.is_terminal:  # scripts: the header, then one line per group
            for row in (USAGE_COLUMNS, *rows):
                typer.echo("\t".join(row))
            return
        table = Table(*USAGE_COLUMNS, title=f"usage by {report.group_by}, {period}")
        for i in range(1, len(USAGE_COLUMNS)):
            table.columns[i].justify = "right"
        for row in rows:
            table.add_row(*row, end_section=row[0] == "total")
        out.print(table)

    run_call(go())
