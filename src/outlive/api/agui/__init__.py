"""AG-UI at `/ag-ui`: agent runs for AG-UI clients (`HttpAgent`, CopilotKit), a projection of the
log.

Each run is one run's slice of a session's log, folded into AG-UI events (the
`ag-ui-protocol` package's models and encoder) by `_projection`, with SSE ids so a client
resumes exactly (`_routes`). A question ends a run with an `interrupt` outcome, answered by the
next run's `resume[]`. Nothing is stored besides the session. See docs/frontends.md.
"""

from __future__ import annotations

from ._messages import messages_of
from ._projection import RunHeader, RunProjection, project_run
from ._routes import PREFIX, router

__all__ = ["PREFIX", "RunHeader", "RunProjection", "messages_of", "project_run", "router"]
