"""The status a person reads in `outlive sessions list/show/tail`: the machine status (the
API's, and `tail --json`'s, unchanged) said as what is going on when a session waits on
someone or stopped short."""

from __future__ import annotations

__all__ = ["status_word"]


def status_word(status: str, attention: str | None = None, error_code: str | None = None) -> str:
    """`waiting for you` (the run ended on a question), `waiting on approval` (a tool call
    waits for a decision; no worker holds the session), `incomplete` (failed at the model's
    length limit or the turn limit), `budget reached` (the run stopped at the session's
    budget), `waiting on client tools` (its client's tool results; no worker holds it), else
    the status itself."""
    if attention == "question":
        return "waiting for you"
    if attention == "approval":
        return "waiting on approval"
    if attention == "budget":
        return "budget reached"
    if attention == "tool":
        return "waiting on client tools"
    if status == "failed" and error_code == "incomplete":
        return "incomplete"
    return status
