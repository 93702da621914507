"""An OpenAI-compatible Responses API under `/openai/v1`: a projection of the session log.

The official OpenAI SDKs (pointed at `base_url=<server>/openai/v1`, with an outlive API key)
create responses, stream them, resume a dropped stream with `starting_after`, retrieve, cancel
and delete them. A response is a slice of a session's log (`_feed`), translated by a pure fold
(`_projection`); nothing is stored apart from the session. It is a sub-application of its own
so that every error on it, including a 401, a 404 for an unknown path and a 413, has OpenAI's
shape (`_errors`). See docs/openai-compatible.md.
"""

from __future__ import annotations

from fastapi import FastAPI

from ... import __version__
from .._context import ApiContext
from ._errors import OpenAIBodyLimit, install_openai_errors
from ._feed import ResponseRef
from ._projection import OPENERS, SERVER_LABEL, ResponseHeader, ResponseProjection, project
from ._routes import router

__all__ = [
    "OPENERS",
    "PREFIX",
    "SERVER_LABEL",
    "ResponseHeader",
    "ResponseProjection",
    "ResponseRef",
    "openai_app",
    "project",
]

PREFIX = "/openai/v1"


def openai_app(ctx: ApiContext) -> FastAPI:
    """The sub-application to mount at `PREFIX`; it shares the main app's context."""
    app = FastAPI(
        title="outlive: OpenAI-compatible Responses API",
        version=__version__,
        description="A projection of outlive sessions in the shape of OpenAI's Responses API.",
    )
    app.state.ctx = ctx
    install_openai_errors(app)
    app.add_middleware(OpenAIBodyLimit, max_body=ctx.settings.max_body)
    app.include_router(router)
    return app
