"""The SSE parser: fields, multi-line data, comments, line endings, chunking."""

from __future__ import annotations

import pytest

from outlive.client import SSEMessage, SSEParser
from outlive.client._sse import aiter_sse, iter_sse


def parse(*chunks: bytes | str) -> list[SSEMessage]:
    return list(iter_sse(chunks))


def test_basic_fields():
    msgs = parse("id: 7\nevent: text_delta\ndata: {\"seq\": 7}\n\n")
    assert msgs == [SSEMessage(event="text_delta", data='{"seq": 7}', id="7")]


def test_event_defaults_to_message_and_id_is_optional():
    assert parse("data: x\n\n") == [SSEMessage(event="message", data="x", id=None)]


def test_multi_line_data_is_joined_with_newlines():
    msgs = parse("data: first\ndata:second\ndata:  third\ndata\n\n")
    assert msgs[0].data == "first\nsecond\n third\n"


def test_comments_are_skipped_and_counted():
    p = SSEParser()
    assert p.feed(": ping\n\n:another\n\n") == []
    assert p.comments == 2
    assert p.feed("data: a\n: in the middle\ndata: b\n\n")[0].data == "a\nb"
    assert p.comments == 3


@pytest.mark.parametrize("eol", ["\n", "\r\n", "\r"])
def test_every_line_ending(eol: str):
    text = f"id: 1{eol}event: e{eol}data: a{eol}data: b{eol}{eol}data: c{eol}{eol}"
    msgs = parse(text)
    assert [(m.id, m.event, m.data) for m in msgs] == [("1", "e", "a\nb"), (None, "message", "c")]


def test_crlf_split_across_chunks_is_one_line_end():
    msgs = parse("data: a\r", "\n", "\r", "\ndata: b\r\n\r\n")
    assert [m.data for m in msgs] == ["a", "b"]


def test_lone_cr_at_chunk_end_then_data():
    # "\r" then "data" — the CR ended the line; the next chunk starts a new one.
    msgs = parse("data: a\r", "\r", "data: b\n\n")
    assert [m.data for m in msgs] == ["a", "b"]


def test_every_split_point_gives_the_same_messages():
    text = ('id: 3\r\nevent: snapshot\r\ndata: {"a":\r\ndata: "é€"}\r\n\r\n'
            ': ping\r\n\r\nid: 4\ndata: z\n\n')
    raw = text.encode()
    whole = parse(raw)
    assert [m.data for m in whole] == ['{"a":\n"é€"}', "z"]
    for i in range(len(raw) + 1):
        assert parse(raw[:i], raw[i:]) == whole, i
    assert parse(*[raw[i : i + 1] for i in range(len(raw))]) == whole


def test_utf8_split_inside_a_character():
    raw = "data: é€😀\n\n".encode()
    p = SSEParser()
    out = []
    for b in raw:
        out.extend(p.feed(bytes([b])))
    assert out[0].data == "é€😀"


def test_no_dispatch_without_data_but_id_counts():
    p = SSEParser()
    assert p.feed("id: 9\n\n") == []
    assert p.last_event_id == "9"
    assert p.feed("event: x\n\n") == []
    msg = p.feed("data: y\n\n")[0]
    assert msg.event == "message" and msg.id is None  # buffers reset between messages


def test_incomplete_message_at_eof_is_dropped():
    assert parse("data: done\n\ndata: half") == [SSEMessage("message", "done", None)]


def test_leading_bom_and_field_without_colon():
    msgs = parse("\ufeffdata: a\n\n")
    assert msgs[0].data == "a"
    msgs = parse(b"\xef\xbb\xbfevent: e\ndata: b\n\n")
    assert (msgs[0].event, msgs[0].data) == ("e", "b")


def test_id_with_nul_is_ignored_and_unknown_fields_too():
    msgs = parse("id: a\0b\nfoo: bar\ndata: x\n\n")
    assert msgs[0].id is None


def test_only_one_space_after_colon_is_dropped():
    assert parse("data:  two\n\n")[0].data == " two"
    assert parse("data:none\n\n")[0].data == "none"


def test_retry_is_a_stream_setting():
    p = SSEParser()
    p.feed("retry: 2500\n\nretry: x\n\n")
    assert p.retry == 2500


async def test_async_iteration():
    async def chunks():
        for c in (b"id: 1\nda", b"ta: x\n", b"\nid: 2\ndata: y\n\n"):
            yield c

    msgs = [m async for m in aiter_sse(chunks())]
    assert [(m.id, m.data) for m in msgs] == [("1", "x"), ("2", "y")]
