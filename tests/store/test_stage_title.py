"""Worker-side session metadata: set_stage and set_auto_title (fenced, with their events)."""

from __future__ import annotations

from outlive.domain.model import MAX_TITLE_CHARS, TitleState

from ._support import assert_gapless, held, new_owner, owner_events, world


async def test_set_stage_writes_stage_event_and_owner_event(store):
    owner = await new_owner(store)
    s, lease = await held(store, owner.id)
    await store.set_stage(lease, "researching")
    got = await store.load_session(s.id)
    assert got.stage == "researching"
    ev = (await store.read_events(s.id))[-1]
    assert (ev.type, ev.data, ev.fence) == ("stage", {"stage": "researching"}, 1)
    assert (await owner_events(store, owner.id))[-1] == (
        "session_active_stage", {"stage": "researching"}
    )
    await store.set_stage(lease, "writing")
    assert (await store.load_session(s.id)).stage == "writing"
    assert [e.data["stage"] for e in await store.read_events(s.id) if e.type == "stage"] == [
        "researching", "writing"
    ]
    await assert_gapless(store, owner.id, s.id)


async def test_set_auto_title_on_a_pending_title(store):
    owner = await new_owner(store)
    s, lease = await held(store, owner.id)
    assert await store.set_auto_title(lease, "Trip to Lisbon") is True
    got = await store.load_session(s.id)
    assert (got.title, got.title_state) == ("Trip to Lisbon", TitleState.AUTOMATIC)
    ev = (await store.read_events(s.id))[-1]
    assert (ev.type, ev.data) == ("title", {"title": "Trip to Lisbon"})
    assert (await owner_events(store, owner.id))[-1] == (
        "session_title", {"title": "Trip to Lisbon"}
    )
    # an automatic title may be replaced by a better automatic one
    assert await store.set_auto_title(lease, "Lisbon itinerary") is True
    assert (await store.get_session(owner.id, s.id)).title == "Lisbon itinerary"
    await assert_gapless(store, owner.id, s.id)


async def test_set_auto_title_is_cut_to_the_limit(store):
    owner = await new_owner(store)
    s, lease = await held(store, owner.id)
    assert await store.set_auto_title(lease, "x" * (MAX_TITLE_CHARS + 50)) is True
    assert (await store.load_session(s.id)).title == "x" * MAX_TITLE_CHARS


async def test_set_auto_title_never_overrides_a_manual_title(store):
    owner = await new_owner(store)
    s, lease = await held(store, owner.id)
    await store.set_title(owner.id, s.id, "Mine")
    before = await world(store, owner.id, s.id)
    assert await store.set_auto_title(lease, "Generated") is False
    assert await world(store, owner.id, s.id) == before
    got = await store.load_session(s.id)
    assert (got.title, got.title_state) == ("Mine", TitleState.MANUAL)


async def test_manual_title_replaces_an_automatic_one(store):
    owner = await new_owner(store)
    s, lease = await held(store, owner.id)
    await store.set_auto_title(lease, "Generated")
    out = await store.set_title(owner.id, s.id, "Mine")
    assert (out.title, out.title_state) == ("Mine", TitleState.MANUAL)
    assert await store.set_auto_title(lease, "Generated again") is False
