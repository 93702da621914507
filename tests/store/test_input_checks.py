"""What the Store refuses, identically on SQLite and PostgreSQL, before anything is written:
lone surrogates and NUL anywhere in metadata (keys and values, at any depth), in a
client_request_id, a prompt, a message or a title; `abandon_after` that is not positive or
longer than 30 days (the API also refuses less than 30 s).
And how titles are cleaned: bidi controls stripped, a title that shows nothing refused (a
manual one) or dropped (an automatic one)."""

from __future__ import annotations

import math
from typing import Any

import pytest

from outlive.domain import InvalidInput
from outlive.domain.model import TitleState
from outlive.store import MAX_ABANDON_AFTER, MIN_ABANDON_AFTER
from tests.support.store_suite import held, new_owner, new_session

BAD_METADATA: list[Any] = [
    {"\ud800": 1}, {"k": "\udfff"}, {"k": ["ok", {"deep": "x\ud83d"}]},
    {"k\x00": 1}, {"k": "a\x00b"}, {"k": [{"x": "\x00"}]}, {"k": math.inf},
]


async def test_metadata_with_nul_or_lone_surrogates_is_refused(store):
    owner = await new_owner(store)
    for metadata in BAD_METADATA:
        with pytest.raises(InvalidInput):
            await store.create_session(owner.id, agent="demo", model="demo:scripted",
                                       prompt="hi", metadata=metadata)
    assert (await store.list_sessions(owner.id)).items == []


async def test_text_fields_refuse_lone_surrogates_and_nul(store):
    owner = await new_owner(store)
    for bad in ("\ud800", "a\x00"):
        for kwargs in ({"prompt": bad}, {"title": bad}, {"agent": bad}, {"model": bad}):
            args: dict[str, Any] = {"agent": "demo", "model": "demo:scripted",
                                    "prompt": "hi", **kwargs}
            with pytest.raises(InvalidInput):
                await store.create_session(owner.id, **args)
    assert (await store.list_sessions(owner.id)).items == []
    s = await new_session(store, owner.id)
    for bad in ("x\udc00y", "\x00"):
        with pytest.raises(InvalidInput):
            await store.post_message(owner.id, s.id, bad)
        with pytest.raises(InvalidInput):
            await store.post_message(owner.id, s.id, "fine", client_request_id=bad)
        with pytest.raises(InvalidInput):
            await store.set_title(owner.id, s.id, bad)
    assert [e.seq for e in await store.read_events(s.id)] == [1]
    # a valid astral character (a surrogate *pair* in JSON) is fine everywhere
    ok = await store.create_session(owner.id, agent="demo", model="demo:scripted",
                                    prompt="hi 😀", metadata={"😀": "😀"})
    assert (await store.get_session(owner.id, ok.id)).metadata == {"😀": "😀"}


async def test_abandon_after_is_bounded(store):
    owner = await new_owner(store)
    for value in (0, MAX_ABANDON_AFTER + 1, 1e300, math.inf, math.nan, -30.0):
        with pytest.raises(InvalidInput, match="abandon_after"):
            await store.create_session(owner.id, agent="demo", model="demo:scripted",
                                       prompt="hi", abandon_after=value)
    for value in (MIN_ABANDON_AFTER, MAX_ABANDON_AFTER):
        s = await store.create_session(owner.id, agent="demo", model="demo:scripted",
                                       prompt="hi", abandon_after=value)
        assert s.abandon_after == value
    assert await store.cancel_abandoned() == []  # the longest bound fits the interval math


async def test_titles_lose_bidi_controls_and_invisible_titles_are_refused(store):
    owner = await new_owner(store)
    s = await store.create_session(owner.id, agent="demo", model="demo:scripted",
                                   prompt="hi", title="\u202eexe.txt\u202c")
    assert s.title == "exe.txt"
    renamed = await store.set_title(owner.id, s.id, "in\u2066voice\u2069 \u200f")
    assert renamed.title == "invoice"
    for invisible in ("\u200b", "\u200b \u200d\ufeff", "\u202e\u202c", "\u2060 "):
        with pytest.raises(InvalidInput, match="visible"):
            await store.set_title(owner.id, s.id, invisible)
    assert (await store.get_session(owner.id, s.id)).title == "invoice"


async def test_automatic_titles_are_cleaned_or_dropped(store):
    owner = await new_owner(store)
    session, lease = await held(store, owner.id)
    assert session.title_state is TitleState.PENDING
    assert await store.set_auto_title(lease, "\u200b\u200c") is False
    assert (await store.get_session(owner.id, session.id)).title is None
    assert await store.set_auto_title(lease, "\u202egnp.tab\u202c pay \x00 now") is True
    after = await store.get_session(owner.id, session.id)
    assert (after.title, after.title_state) == ("gnp.tab pay \ufffd now", TitleState.AUTOMATIC)
