"""An OpenAI-compatible Responses API: a projection of the session log.

A response is a slice of a session's log, translated by a pure fold (`_projection`) into the
Responses API's stream events and Response object; nothing is stored apart from the session.
"""

from __future__ import annotations

from ._projection import SERVER_LABEL, ResponseHeader, ResponseProjection, project

__all__ = ["SERVER_LABEL", "ResponseHeader", "ResponseProjection", "project"]
