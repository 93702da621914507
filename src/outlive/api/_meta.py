"""`GET /v1/meta`: what this server can run, for forms such as the workbench's "New session"."""

from __future__ import annotations

from fastapi import APIRouter
from pydantic import BaseModel

from ._auth import CurrentOwner
from ._context import Ctx
from ._errors import error_responses

__all__ = ["router"]

router = APIRouter(prefix="/v1", tags=["meta"])


class AgentOut(BaseModel):
    name: str
    model: str


class MetaOut(BaseModel):
    agents: list[AgentOut]
    routes: list[str]
    """Model route prefixes that can serve a session now, e.g. `demo:`."""
    default_model: str


@router.get("/meta", response_model=MetaOut, responses=error_responses(401),
            summary="Configured agents and model routes")
async def meta(ctx: Ctx, owner: CurrentOwner) -> MetaOut:
    return MetaOut(
        agents=[AgentOut(name=a.name, model=a.model) for a in ctx.catalog.agents()],
        routes=[f"{p}:" for p in ctx.catalog.model_prefixes()],
        default_model=ctx.catalog.default_model,
    )
