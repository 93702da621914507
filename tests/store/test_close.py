"""Closing a store while a write is in flight: the write ends whole first.

A write is shielded from its caller's cancellation (a client that hangs up mid-request, a
worker task stopped at shutdown), so it can still be running when the process closes its
store. It must then commit (or roll back) on its connection before that connection goes;
closing under it would lose a write its caller may already have reported as sent, and leave
an exception no one retrieves.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from outlive.domain import Status


async def test_close_waits_for_a_write_whose_caller_was_cancelled(store_factory: Any) -> None:
    store = await store_factory()
    owner = await store.ensure_owner("alice")
    in_flight = asyncio.Event()
    creating: asyncio.Task[Any] | None = None

    def first_statement(name: str) -> None:
        if not in_flight.is_set():
            in_flight.set()
            assert creating is not None
            creating.cancel()  # the caller goes away; its transaction has begun

    store.on_query = first_statement
    creating = asyncio.create_task(
        store.create_session(owner.id, agent="demo", model="demo:scripted", prompt="hi"))
    await in_flight.wait()
    await store.close()
    with pytest.raises(asyncio.CancelledError):
        await creating

    again = await store_factory()
    page = await again.list_sessions(owner.id)
    assert [s.status for s in page.items] == [Status.QUEUED]
