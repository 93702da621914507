"""The owner's monthly budget (docs/usage.md): read it with where the month stands, set it.

Owner-scoped: a key sees and sets its own owner's. A bad budget is a 400 that says what a
budget may hold; raising it (or removing it) queues again the owner's sessions it had
stopped that their own budgets allow to go on.
"""

from __future__ import annotations

from typing import Any, Literal

from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict, Field

from ..domain.budget import OwnerBudget
from ._auth import CurrentOwner
from ._context import Ctx
from ._errors import error_responses
from ._schemas import UsageTotalsOut, usage_out

__all__ = ["router"]

router = APIRouter(prefix="/v1", tags=["usage"])


class OwnerBudgetIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    monthly: dict[str, Any] | None = Field(
        description="Caps per calendar month (UTC) on all the owner's sessions' model calls: "
        "any of max_cost_usd (decimal USD), max_tokens (input + output), max_model_calls; "
        "each null for none. null: no monthly budget.")


class OwnerBudgetOut(BaseModel):
    monthly: dict[str, Any] | None = Field(description="The caps (null: none).")
    month: str = Field(description="The calendar month it stands for, YYYY-MM (UTC).")
    used: UsageTotalsOut = Field(description="What the owner's model calls used this month "
                                 "(the usage ledger, purged sessions included).")
    held: UsageTotalsOut = Field(description="What the calls in flight hold now: the most "
                                 "each may use, counted until its answer is written.")
    reached: Literal["max_cost_usd", "max_tokens", "max_model_calls"] | None = Field(
        description="The cap the month (with what is held) has reached: the owner's "
        "sessions stop before their next model call, attention `budget`.")


def _out(state: OwnerBudget) -> OwnerBudgetOut:
    return OwnerBudgetOut(
        monthly=None if state.budget is None else state.budget.owner_dict(),
        month=state.month, used=usage_out(state.used), held=usage_out(state.held),
        reached=state.reached())  # type: ignore[arg-type]


@router.get(
    "/budget",
    response_model=OwnerBudgetOut,
    responses=error_responses(401),
    summary="The owner's monthly budget and where this month stands",
)
async def get_budget(owner: CurrentOwner, ctx: Ctx) -> OwnerBudgetOut:
    return _out(await ctx.store.owner_budget(owner.id))


@router.put(
    "/budget",
    response_model=OwnerBudgetOut,
    responses=error_responses(400, 401, 422),
    summary="Set (or remove, with null) the owner's monthly budget",
)
async def put_budget(body: OwnerBudgetIn, owner: CurrentOwner, ctx: Ctx) -> OwnerBudgetOut:
    return _out(await ctx.store.set_owner_budget(owner.id, body.monthly))
