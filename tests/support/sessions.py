"""Reading a session back through the Store while a worker runs it."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from outlive.domain import Event, Session, Status
from outlive.store import Store

from .waiting import eventually

ENDED = (Status.SUCCEEDED, Status.FAILED, Status.CANCELLED)


async def settled(store: Store, session_id: str, timeout: float = 15.0) -> Session:
    """The session once its status is terminal."""

    async def ended() -> Session | None:
        s = await store.load_session(session_id)
        return s if s.status in ENDED else None

    out: Session = await eventually(ended, timeout, what=f"session {session_id} settled")
    return out


async def all_events(store: Store, session_id: str) -> list[Event]:
    return await store.read_events(session_id, limit=100_000)


async def event_appears(store: Store, session_id: str, type_: str,
                        where: Callable[[Event], bool] = lambda e: True,
                        timeout: float = 15.0) -> Event:
    """The first `type_` event of the session that satisfies `where`, once there is one."""

    async def found() -> Event | None:
        return next((e for e in await all_events(store, session_id)
                     if e.type == type_ and where(e)), None)

    out: Event = await eventually(found, timeout, what=f"a {type_} event in {session_id}")
    return out


def exact_log(events: Sequence[Event]) -> bool:
    """Gapless seqs, and each answer's deltas add up to its authoritative text."""
    if [e.seq for e in events] != list(range(1, len(events) + 1)):
        return False
    texts: dict[str, str] = {}
    for e in events:
        if e.type == "text_delta":
            texts[e.data["message_id"]] = texts.get(e.data["message_id"], "") + e.data["text"]
        elif e.type == "message_end" and texts.get(e.data["message_id"], "") != e.data["text"]:
            return False
    return True
