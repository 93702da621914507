"""The turn buffer coalesces model output and is the run's back-pressure: past its limit the
model's stream waits for a flush instead of memory growing while the database is slow."""

from __future__ import annotations

import asyncio

from outlive.runtime.streaming import TurnBuffer


async def test_a_full_buffer_holds_the_reader_until_a_flush_drains_it():
    buf = TurnBuffer("m1", flush_bytes=4, limit_bytes=10)
    buf.add("text", "hello")
    assert not buf.full
    buf.add("text", "wörld")  # 6 bytes in UTF-8: 11 waiting
    assert buf.full
    waiter = asyncio.create_task(buf.room())
    await asyncio.sleep(0.01)
    assert not waiter.done()
    events = buf.drain()
    pieces = [e.data["text"] for e in events]
    assert "".join(pieces) == "hellowörld"
    assert all(len(p.encode()) <= 4 for p in pieces)
    async with asyncio.timeout(1):
        await waiter
    assert not buf.full and buf.text == "hellowörld"


def test_waiting_bytes_are_utf8_bytes_for_ascii_and_not() -> None:
    ascii_only = TurnBuffer("m1", limit_bytes=10)
    ascii_only.add("text", "123456789")
    assert not ascii_only.full and ascii_only.pending()
    ascii_only.add("thinking", "0")
    assert ascii_only.full
    wide = TurnBuffer("m2", limit_bytes=10)
    wide.add("text", "ééééé")  # 5 characters, 10 bytes
    assert wide.full
    wide.drain()
    assert not wide.full and not wide.pending()


def test_split_utf8_keeps_short_text_whole_and_cuts_long_text_between_characters() -> None:
    from outlive.runtime.streaming import split_utf8

    assert split_utf8("", 4) == []
    assert split_utf8("abcd", 4) == ["abcd"]
    assert split_utf8("éé", 4) == ["éé"]  # 4 bytes exactly
    assert split_utf8("ééé", 4) == ["éé", "é"]
    assert split_utf8("abcde", 4) == ["abcd", "e"]
    assert all(len(p.encode()) <= 4 for p in split_utf8("a€€b", 4))
    assert "".join(split_utf8("a€€b", 4)) == "a€€b"
