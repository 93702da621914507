"""The Vercel AI SDK's UI message stream (protocol v1) at `/ai-sdk`: a projection of the log.

`useChat` (with the default transport, or the workflow transport for its chunk cursor) talks
to outlive unchanged: each answer is one run's slice of the session log, folded into UI message
stream chunks (`_projection`), resumable after a reload and stoppable for real (`_routes`).
Nothing is stored besides the session. See docs/frontends.md.
"""

from __future__ import annotations

from ._projection import ASK_TOOL, ChatProjection, hidden_deltas, project_chat
from ._routes import PREFIX, router

__all__ = ["ASK_TOOL", "PREFIX", "ChatProjection", "hidden_deltas", "project_chat", "router"]
