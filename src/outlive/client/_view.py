"""`SessionView`: a live transcript of one session, folded by the domain reducer.

The stream's snapshot frame gives the state at its seq; every event after it is folded with
`outlive.domain.reducer.apply`, the same rules the server uses for snapshots and the web page
repeats, so the view equals `GET /v1/sessions/{id}`'s snapshot at the same seq.

    view = SessionView(client, session_id, until_end=True)
    async for state in view:        # one state per change, across reconnects
        render(state)
    print(view.status)
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from ..domain.reducer import REDUCER_VERSION, apply, empty_state, fold
from ._async_client import AsyncClient
from ._models import TERMINAL_STATUSES, CaughtUpFrame, EventRecord, SnapshotFrame

__all__ = ["SessionView"]

State = dict[str, Any]


class SessionView:
    def __init__(self, client: AsyncClient, session_id: str, *, until_end: bool = False) -> None:
        self.client = client
        self.session_id = session_id
        self.until_end = until_end
        self.state: State = empty_state()
        """The transcript state (read-only: each update is a new dict)."""
        self.caught_up = False
        """True once the replay is over and updates are live."""
        self._synced = False

    @property
    def seq(self) -> int:
        seq: int = self.state["seq"]
        return seq

    @property
    def status(self) -> str:
        status: str = self.state["status"]
        return status

    @property
    def ended(self) -> bool:
        return self.status in TERMINAL_STATUSES

    def __aiter__(self) -> AsyncIterator[State]:
        return self.updates()

    async def updates(self) -> AsyncIterator[State]:
        """Each new state as it changes. Iterating again later resumes where the view is."""
        after = self.seq if self._synced else None
        async for item in self.client.stream(self.session_id, after, until_end=self.until_end):
            if isinstance(item, SnapshotFrame):
                self.state = await self._adopt(item)
                self._synced = True
                yield self.state
            elif isinstance(item, EventRecord):
                self.state = apply(self.state, item.type, item.seq, item.data)
                self._synced = True
                yield self.state
            elif isinstance(item, CaughtUpFrame):
                self.caught_up = True

    async def run(self) -> State:
        """Follow the session until the stream ends (with `until_end`: until it ends);
        returns the final state."""
        async for _ in self.updates():
            pass
        return self.state

    async def _adopt(self, frame: SnapshotFrame) -> State:
        if frame.state.get("version") == REDUCER_VERSION:
            return dict(frame.state)
        # A server with another reducer version: rebuild the state from the log instead.
        events = await self.client.all_events(self.session_id)
        return fold(
            (e.type, e.seq, e.data) for e in events if e.seq <= frame.seq
        )
