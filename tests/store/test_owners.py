"""Owners: ensure_owner and API keys (looked up by hash, revocable); isolation (a foreign
session looks exactly like a missing one); and input validation (bad input raises a typed
error and writes nothing)."""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from outlive.domain import InvalidInput, NotFound, TooLarge
from outlive.domain.model import MAX_TEXT_CHARS, MAX_TITLE_CHARS
from tests.support.store_suite import AnyStore, held, new_owner, new_session, world


def _hash(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


async def test_ensure_owner_creates_once(store):
    name = f"alice-{uuid.uuid4().hex[:6]}"
    first = await store.ensure_owner(name)
    again = await store.ensure_owner(name)
    assert first == again and first.name == name and first.id.startswith("own_")
    other = await store.ensure_owner(name + "-2")
    assert other.id != first.id
    assert await store.last_owner_event_id(first.id) == 0


@pytest.mark.parametrize("name", ["", "n" * 101])
async def test_ensure_owner_rejects_bad_names(store, name):
    with pytest.raises(InvalidInput):
        await store.ensure_owner(name)


async def test_api_keys_resolve_to_their_owner_until_revoked(store):
    alice = await store.ensure_owner("alice")
    bob = await store.ensure_owner("bob")
    k1 = await store.create_api_key(alice.id, _hash("secret-1"), "laptop")
    k2 = await store.create_api_key(alice.id, _hash("secret-2"), None)
    k3 = await store.create_api_key(bob.id, _hash("secret-3"), "ci")
    assert len({k1, k2, k3}) == 3
    assert await store.owner_for_key(_hash("secret-1")) == alice
    assert await store.owner_for_key(_hash("secret-2")) == alice
    assert await store.owner_for_key(_hash("secret-3")) == bob
    assert await store.owner_for_key(_hash("unknown")) is None
    assert await store.owner_for_key("secret-1") is None  # only hashes are looked up

    keys = {k.id: k for k in await store.list_api_keys()}
    assert set(keys) == {k1, k2, k3}
    assert (keys[k1].owner_id, keys[k1].owner_name, keys[k1].label) == (
        alice.id, "alice", "laptop"
    )
    assert keys[k2].label is None and keys[k3].owner_name == "bob"
    assert not any(k.revoked for k in keys.values())
    assert all(k.created_at is not None for k in keys.values())

    assert await store.revoke_api_key(k1) is True
    assert await store.revoke_api_key(k1) is False
    assert await store.revoke_api_key("key_01J9ZZZZZZZZZZZZZZZZZZZZZZ") is False
    assert await store.owner_for_key(_hash("secret-1")) is None
    assert await store.owner_for_key(_hash("secret-2")) == alice
    keys = {k.id: k for k in await store.list_api_keys()}
    assert keys[k1].revoked and not keys[k2].revoked


async def test_key_hashes_are_stored_not_keys(store):
    """The store keeps what it was given; the caller hashes. Two keys never share a hash."""
    owner = await store.ensure_owner("carol")
    await store.create_api_key(owner.id, _hash("k"), None)
    with pytest.raises(Exception):  # noqa: B017 - the adapters raise their driver's error
        await store.create_api_key(owner.id, _hash("k"), "dup")
    assert len(await store.list_api_keys()) == 1


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


async def test_foreign_session_is_not_found_like_a_missing_one(store):
    alice, bob = await new_owner(store, "alice"), await new_owner(store, "bob")
    s, _ = await held(store, alice.id)
    before = await world(store, alice.id, s.id)
    for name, call in OWNER_SCOPED.items():
        with pytest.raises(NotFound) as foreign:
            await call(store, bob.id, s.id)
        with pytest.raises(NotFound) as missing:
            await call(store, bob.id, MISSING)
        assert str(foreign.value).replace(s.id, "<id>") == str(missing.value).replace(
            MISSING, "<id>"
        ), name
        assert foreign.value.code == missing.value.code == "NOT_FOUND", name
        assert foreign.value.details == missing.value.details, name
        assert await world(store, alice.id, s.id) == before, name
    assert await store.read_owner_events(bob.id) == []
    assert (await store.list_sessions(bob.id)).items == []


async def test_foreign_sessions_are_not_listed(store):
    alice, bob = await new_owner(store, "alice"), await new_owner(store, "bob")
    await new_session(store, alice.id)
    assert (await store.list_sessions(bob.id)).items == []
    assert (await store.list_sessions(bob.id, status="queued")).items == []
    assert await store.read_owner_events(bob.id) == []


async def test_deleted_session_is_not_found_for_its_owner(store):
    owner = await new_owner(store)
    s = await new_session(store, owner.id)
    await store.delete_session(owner.id, s.id)
    before = await world(store, owner.id, s.id)
    for name, call in OWNER_SCOPED.items():
        with pytest.raises(NotFound):
            await call(store, owner.id, s.id)
        assert await world(store, owner.id, s.id) == before, name


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


NUL_INPUT: dict[str, tuple[type[Exception], Call]] = {
    "post_text_nul": (InvalidInput, lambda st, o, sid: st.post_message(o, sid, "a\x00b")),
    "title_nul": (InvalidInput, lambda st, o, sid: st.set_title(o, sid, "a\x00b")),
    "create_prompt_nul": (InvalidInput, lambda st, o, sid: new_session(st, o, prompt="a\x00")),
    "create_title_nul": (InvalidInput, lambda st, o, sid: new_session(st, o, title="a\x00")),
}


@pytest.mark.parametrize("cases", [BAD_INPUT, NUL_INPUT], ids=["bad_input", "nul_character"])
async def test_bad_input_raises_a_typed_error_and_writes_nothing(store, cases):
    """NUL characters: PostgreSQL text and jsonb cannot hold them, so both adapters must refuse
    them alike, with a typed error (today SQLite stores them and PostgreSQL raises a driver
    error)."""
    owner = await new_owner(store)
    s, _ = await held(store, owner.id)
    before = await world(store, owner.id, s.id)
    n_sessions = len((await store.list_sessions(owner.id)).items)
    wrong = []
    for case, (error, call) in cases.items():
        try:
            await call(store, owner.id, s.id)
        except Exception as exc:
            if type(exc) is not error:
                wrong.append(f"{case}: raised {exc!r}, wanted {error.__name__}")
        else:
            wrong.append(f"{case}: went through")
        if await world(store, owner.id, s.id) != before:
            wrong.append(f"{case}: changed the session, its events or the owner's events")
            before = await world(store, owner.id, s.id)
    assert wrong == []
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
