"""Owner isolation and input validation: foreign sessions look exactly like missing ones, and
bad input raises a typed error and writes nothing."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from outlive.domain import InvalidInput, NotFound, TooLarge
from outlive.domain.model import MAX_TEXT_CHARS, MAX_TITLE_CHARS

from ._support import AnyStore, held, new_owner, new_session, world

MISSING = "ses_01J9ZZZZZZZZZZZZZZZZZZZZZZ"

Call = Callable[[AnyStore, str, str], Awaitable[Any]]

OWNER_SCOPED: dict[str, Call] = {
    "get_session": lambda st, owner, sid: st.get_session(owner, sid),
    "set_title": lambda st, owner, sid: st.set_title(owner, sid, "stolen"),
    "delete_session": lambda st, owner, sid: st.delete_session(owner, sid),
    "request_cancel": lambda st, owner, sid: st.request_cancel(owner, sid),
    "post_message": lambda st, owner, sid: st.post_message(owner, sid, "hi"),
    "post_message_reject": lambda st, owner, sid: st.post_message(owner, sid, "hi",
                                                                  mode="reject"),
    "read_events": lambda st, owner, sid: st.read_events(sid, owner_id=owner),
}


@pytest.mark.parametrize("call", list(OWNER_SCOPED))
async def test_foreign_session_is_not_found_like_a_missing_one(store, call):
    alice, bob = await new_owner(store, "alice"), await new_owner(store, "bob")
    s, _ = await held(store, alice.id)
    before = await world(store, alice.id, s.id)
    bob_before = await store.read_owner_events(bob.id)
    with pytest.raises(NotFound) as foreign:
        await OWNER_SCOPED[call](store, bob.id, s.id)
    with pytest.raises(NotFound) as missing:
        await OWNER_SCOPED[call](store, bob.id, MISSING)
    assert str(foreign.value).replace(s.id, "<id>") == str(missing.value).replace(MISSING, "<id>")
    assert foreign.value.code == missing.value.code == "NOT_FOUND"
    assert foreign.value.details == missing.value.details
    assert await world(store, alice.id, s.id) == before
    assert await store.read_owner_events(bob.id) == bob_before


async def test_foreign_sessions_are_not_listed(store):
    alice, bob = await new_owner(store, "alice"), await new_owner(store, "bob")
    await new_session(store, alice.id)
    assert (await store.list_sessions(bob.id)).items == []
    assert (await store.list_sessions(bob.id, status="queued")).items == []
    assert await store.read_owner_events(bob.id) == []


@pytest.mark.parametrize("call", list(OWNER_SCOPED))
async def test_deleted_session_is_not_found_for_its_owner(store, call):
    owner = await new_owner(store)
    s = await new_session(store, owner.id)
    await store.delete_session(owner.id, s.id)
    before = await world(store, owner.id, s.id)
    with pytest.raises(NotFound):
        await OWNER_SCOPED[call](store, owner.id, s.id)
    assert await world(store, owner.id, s.id) == before


BAD_INPUT: dict[str, tuple[type[Exception], Call]] = {
    "post_text_too_long": (TooLarge, lambda st, o, sid: st.post_message(
        o, sid, "x" * (MAX_TEXT_CHARS + 1))),
    "post_text_empty": (InvalidInput, lambda st, o, sid: st.post_message(o, sid, "")),
    "post_text_blank": (InvalidInput, lambda st, o, sid: st.post_message(o, sid, " \n\t ")),
    "post_unknown_mode": (InvalidInput, lambda st, o, sid: st.post_message(
        o, sid, "hi", mode="shout")),
    "post_mode_start": (InvalidInput, lambda st, o, sid: st.post_message(
        o, sid, "hi", mode="start")),
    "post_request_id_too_long": (InvalidInput, lambda st, o, sid: st.post_message(
        o, sid, "hi", client_request_id="r" * 201)),
    "title_too_long": (InvalidInput, lambda st, o, sid: st.set_title(
        o, sid, "t" * (MAX_TITLE_CHARS + 1))),
    "title_empty": (InvalidInput, lambda st, o, sid: st.set_title(o, sid, "   ")),
    "list_bad_status": (InvalidInput, lambda st, o, sid: st.list_sessions(o, status="done")),
    "list_bad_cursor": (InvalidInput, lambda st, o, sid: st.list_sessions(o, cursor="abc")),
    "list_cursor_injection": (InvalidInput, lambda st, o, sid: st.list_sessions(
        o, cursor="ses_' OR 1=1 --")),
    "list_bad_limit": (InvalidInput, lambda st, o, sid: st.list_sessions(o, limit=0)),
    "list_limit_too_big": (InvalidInput, lambda st, o, sid: st.list_sessions(o, limit=501)),
    "create_prompt_too_long": (TooLarge, lambda st, o, sid: new_session(
        st, o, prompt="x" * (MAX_TEXT_CHARS + 1))),
    "create_prompt_empty": (InvalidInput, lambda st, o, sid: new_session(st, o, prompt="")),
    "create_title_too_long": (InvalidInput, lambda st, o, sid: new_session(
        st, o, title="t" * (MAX_TITLE_CHARS + 1))),
    "create_no_agent": (InvalidInput, lambda st, o, sid: new_session(st, o, agent="")),
    "create_no_model": (InvalidInput, lambda st, o, sid: new_session(st, o, model="")),
    "create_bad_abandon_after": (InvalidInput, lambda st, o, sid: new_session(
        st, o, abandon_after=0)),
    "post_unknown_session": (NotFound, lambda st, o, sid: st.post_message(o, MISSING, "hi")),
    "cancel_unknown_session": (NotFound, lambda st, o, sid: st.request_cancel(o, MISSING)),
    "title_unknown_session": (NotFound, lambda st, o, sid: st.set_title(o, MISSING, "t")),
    "load_unknown_session": (NotFound, lambda st, o, sid: st.load_session(MISSING)),
    "create_unknown_owner": (NotFound, lambda st, o, sid: new_session(
        st, "own_01J9ZZZZZZZZZZZZZZZZZZZZZZ")),
}


@pytest.mark.parametrize("case", list(BAD_INPUT))
async def test_bad_input_raises_a_typed_error_and_writes_nothing(store, case):
    error, call = BAD_INPUT[case]
    owner = await new_owner(store)
    s, _ = await held(store, owner.id)
    before = await world(store, owner.id, s.id)
    n_sessions = len((await store.list_sessions(owner.id)).items)
    with pytest.raises(error) as info:
        await call(store, owner.id, s.id)
    assert type(info.value) is error
    assert await world(store, owner.id, s.id) == before
    assert len((await store.list_sessions(owner.id)).items) == n_sessions


async def test_limits_are_inclusive(store):
    owner = await new_owner(store)
    s = await new_session(store, owner.id, prompt="x" * MAX_TEXT_CHARS,
                          title="t" * MAX_TITLE_CHARS)
    out = await store.post_message(owner.id, s.id, "y" * MAX_TEXT_CHARS)
    assert out.seq == 2
    assert len((await store.read_events(s.id))[1].data["text"]) == MAX_TEXT_CHARS
    assert (await store.set_title(owner.id, s.id, "u" * MAX_TITLE_CHARS)).title == (
        "u" * MAX_TITLE_CHARS
    )
