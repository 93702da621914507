"""What the store conformance suite (tests/store) shares: plain functions, no fixtures."""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass
from typing import Any

from outlive.domain.model import Claim, Entry, Event, Lease, OwnerEvent, Session
from outlive.store import Owner, PostgresStore, SqliteStore

AnyStore = PostgresStore | SqliteStore

LONG_TTL = 30.0
"""A lease that never expires during a test."""


async def new_owner(store: AnyStore, prefix: str = "owner") -> Owner:
    return await store.ensure_owner(f"{prefix}-{uuid.uuid4().hex[:10]}")


async def new_session(
    store: AnyStore, owner_id: str, *, prompt: str | None = "hello", **kw: Any
) -> Session:
    kw.setdefault("agent", "demo")
    kw.setdefault("model", "demo:scripted")
    return await store.create_session(owner_id, prompt=prompt, **kw)


async def claim_one(
    store: AnyStore, worker: str = "w1", *, lease_ttl: float = LONG_TTL, max_attempts: int = 5
) -> Claim:
    """Claim with a limit above what any test leaves claimable and expect exactly one."""
    claims = await store.claim(worker, limit=50, lease_ttl=lease_ttl, max_attempts=max_attempts)
    assert len(claims) == 1, claims
    return claims[0]


async def held(store: AnyStore, owner_id: str, worker: str = "w1") -> tuple[Session, Lease]:
    """A new session claimed by `worker`, with its initial prompt already delivered."""
    s = await new_session(store, owner_id)
    c = await claim_one(store, worker)
    assert c.session.id == s.id and c.lease is not None
    await store.mark_delivered(c.lease, c.session.last_seq)
    return c.session, c.lease


async def expire(store: AnyStore, lease: Lease) -> None:
    """Let `lease` lapse without anyone taking the session: a zero-ttl heartbeat, then a few ms."""
    out = await store.heartbeat(lease.worker, [lease], lease_ttl=0)
    assert [h.session_id for h in out] == [lease.session_id]
    await asyncio.sleep(0.01)


@dataclass(frozen=True)
class World:
    """Everything a write could have touched, to prove that a refused write changed nothing."""

    session: Session
    events: list[Event]
    entries: list[Entry]
    owner_events: list[OwnerEvent]
    last_owner_event_id: int


async def world(store: AnyStore, owner_id: str, session_id: str) -> World:
    return World(
        await store.load_session(session_id),
        await store.read_events(session_id),
        await store.read_entries(session_id),
        await store.read_owner_events(owner_id),
        await store.last_owner_event_id(owner_id),
    )


async def owner_events(store: AnyStore, owner_id: str, after: int = 0) -> list[tuple[str, dict]]:
    return [(e.type, e.data) for e in await store.read_owner_events(owner_id, after=after)]


async def event_types(store: AnyStore, session_id: str, after: int = 0) -> list[str]:
    return [e.type for e in await store.read_events(session_id, after=after)]


async def assert_gapless(store: AnyStore, owner_id: str, session_id: str | None = None) -> None:
    """Owner event ids are 1..n; a session's event seqs are 1..last_seq."""
    oes = await store.read_owner_events(owner_id)
    assert [e.id for e in oes] == list(range(1, len(oes) + 1))
    assert await store.last_owner_event_id(owner_id) == len(oes)
    if session_id is not None:
        s = await store.load_session(session_id)
        evs = await store.read_events(session_id, limit=100_000)
        assert [e.seq for e in evs] == list(range(1, s.last_seq + 1))
