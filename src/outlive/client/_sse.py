"""A small Server-Sent Events parser, per the WHATWG "event stream interpretation" rules.

Lines end in CRLF, LF or CR (also when a CRLF is split across two chunks); a line starting
with ":" is a comment (the server's pings); `data:` lines accumulate, joined by "\\n"; one space
after the colon is dropped; an `id` containing NUL is ignored; a blank line dispatches the
event, and an event without any `data` line is not dispatched (but its `id` still counts, as
in a browser). A leading byte order mark is skipped. Bytes are decoded as UTF-8 incrementally,
so a character split across chunks survives.
"""

from __future__ import annotations

import codecs
import re
from collections.abc import AsyncIterable, AsyncIterator, Iterable, Iterator
from dataclasses import dataclass

__all__ = ["SSEMessage", "SSEParser", "aiter_sse", "iter_sse"]

_EOL = re.compile(r"\r\n|\r|\n")


@dataclass(frozen=True)
class SSEMessage:
    event: str
    """The `event:` field, "message" when absent."""
    data: str
    id: str | None
    """The `id:` field of this message, None when it had none. (`SSEParser.last_event_id`
    keeps the stream's last id, what a reconnect sends as Last-Event-ID.)"""


class SSEParser:
    """Feed it chunks (bytes or str); it returns the messages they complete."""

    def __init__(self) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._buf = ""
        self._after_cr = False
        self._started = False
        self._event = ""
        self._data: list[str] = []
        self._has_data = False
        self._id: str | None = None
        self.retry: int | None = None
        """The last `retry:` field (milliseconds), a stream-level setting."""
        self.last_event_id: str | None = None
        self.comments = 0
        """Comment lines seen (pings); a sign of life with no event."""
        self.last_comment: str | None = None
        """The text of the last comment line (a server says there why it ended a stream)."""

    def feed(self, chunk: bytes | str) -> list[SSEMessage]:
        text = self._decoder.decode(chunk) if isinstance(chunk, bytes) else chunk
        return self._lines(text)

    def close(self) -> list[SSEMessage]:
        """End of stream: an event not yet ended by a blank line is dropped, as in a browser."""
        tail = self._decoder.decode(b"", final=True)
        out = self._lines(tail)
        self._buf = ""
        self._reset()
        return out

    def _lines(self, text: str) -> list[SSEMessage]:
        if not text:
            return []
        if not self._started:
            self._started = True
            text = text.removeprefix("\ufeff")
        if self._after_cr and text.startswith("\n"):
            text = text[1:]  # the LF of a CRLF split across chunks
        self._after_cr = False
        out: list[SSEMessage] = []
        buf = self._buf + text
        pos = 0
        for m in _EOL.finditer(buf):
            msg = self._line(buf[pos : m.start()])
            if msg is not None:
                out.append(msg)
            pos = m.end()
        if pos and buf[pos - 1] == "\r":
            self._after_cr = pos == len(buf)
        self._buf = buf[pos:]
        return out

    def _line(self, line: str) -> SSEMessage | None:
        if line == "":
            return self._dispatch()
        if line.startswith(":"):
            self.comments += 1
            self.last_comment = line[1:].strip()
            return None
        name, colon, value = line.partition(":")
        if colon and value.startswith(" "):
            value = value[1:]
        if name == "data":
            self._data.append(value)
            self._has_data = True
        elif name == "event":
            self._event = value
        elif name == "id":
            if "\0" not in value:
                self._id = value
                self.last_event_id = value
        elif name == "retry":
            if value.isascii() and value.isdigit():
                self.retry = int(value)
        return None

    def _dispatch(self) -> SSEMessage | None:
        if not self._has_data:
            self._reset()
            return None
        msg = SSEMessage(
            event=self._event or "message",
            data="\n".join(self._data),
            id=self._id,
        )
        self._reset()
        return msg

    def _reset(self) -> None:
        self._event = ""
        self._data = []
        self._has_data = False
        self._id = None


def iter_sse(chunks: Iterable[bytes | str], parser: SSEParser | None = None
             ) -> Iterator[SSEMessage]:
    p = parser or SSEParser()
    for chunk in chunks:
        yield from p.feed(chunk)
    yield from p.close()


async def aiter_sse(chunks: AsyncIterable[bytes | str], parser: SSEParser | None = None
                    ) -> AsyncIterator[SSEMessage]:
    p = parser or SSEParser()
    async for chunk in chunks:
        for msg in p.feed(chunk):
            yield msg
    for msg in p.close():
        yield msg
