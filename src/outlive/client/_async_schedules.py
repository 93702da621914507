"""The schedule calls of `AsyncClient` (docs/schedules.md): the API's JSON objects as they
come, kept apart so the client's module says one thing at a time."""

from __future__ import annotations

import abc
from typing import Any, TypeVar

from . import _schedule_calls
from ._calls import Call

__all__ = ["AsyncScheduleCalls"]

T = TypeVar("T")


class AsyncScheduleCalls(abc.ABC):
    @abc.abstractmethod
    async def _call(self, call: Call[T]) -> T:
        """The call sent and its answer read (`AsyncClient._call`: failover included)."""

    async def create_schedule(self, prompt: str, **fields: Any) -> dict[str, Any]:
        """`fields`: cron or every, timezone, agent, model, target, overlap, catch_up."""
        return await self._call(_schedule_calls.create_schedule(prompt, **fields))

    async def schedules(self, *, limit: int | None = None,
                    cursor: str | None = None) -> dict[str, Any]:
        return await self._call(_schedule_calls.list_schedules(limit=limit, cursor=cursor))

    async def pause_schedule(self, schedule_id: str) -> dict[str, Any]:
        return await self._call(_schedule_calls.set_paused(schedule_id, True))

    async def resume_schedule(self, schedule_id: str) -> dict[str, Any]:
        return await self._call(_schedule_calls.set_paused(schedule_id, False))

    async def delete_schedule(self, schedule_id: str) -> dict[str, Any]:
        return await self._call(_schedule_calls.delete_schedule(schedule_id))

    async def schedule_runs(self, schedule_id: str, *, limit: int | None = None) -> dict[str, Any]:
        return await self._call(_schedule_calls.schedule_runs(schedule_id, limit=limit))

    async def schedule_message(self, session_id: str, text: str, *, delay: float | None = None,
                         deliver_at: str | None = None,
                         mode: str | None = None) -> dict[str, Any]:
        """A follow-up posted `delay` seconds from now or at `deliver_at` (RFC 3339)."""
        return await self._call(_schedule_calls.schedule_message(
            session_id, text, delay=delay, deliver_at=deliver_at, mode=mode))

    async def cancel_scheduled(self, session_id: str, message_id: str) -> dict[str, Any]:
        return await self._call(_schedule_calls.cancel_scheduled(session_id, message_id))

    async def scheduled(self, session_id: str) -> dict[str, Any]:
        """The session's messages waiting for their time."""
        return await self._call(_schedule_calls.scheduled(session_id))
