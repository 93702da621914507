"""The copy-on-write state a reducer fold writes through, and the value helpers it uses.

Kept apart from the event handlers (`reducer.py`) so each file says one thing: here, how a
fold over 100k events stays linear and never mutates the state it was given.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .events import UNSET

__all__ = ["ID_FIELD", "State", "Txn", "as_int", "as_text", "given", "ident", "plain_json"]

State = dict[str, Any]

ID_FIELD = {"assistant": "message_id", "tool": "call_id", "approval": "approval_id",
            "client_tool": "call_id"}


class Txn:
    """Copy-on-write view of a state: each part is copied once, the first time it is written.

    Text deltas are buffered as chunk lists and joined in `finish`, because appending to a str
    held in a dict copies it every time (quadratic over a long stream).
    """

    __slots__ = (
        "_buf",
        "_index",
        "_indexed",
        "_items_owned",
        "_lists",
        "_owned",
        "_progress",
        "state",
    )

    def __init__(self, state: Mapping[str, Any], *, indexed: bool) -> None:
        self.state: State = dict(state)
        self._items_owned = False
        self._owned: set[int] = set()
        self._progress: set[int] = set()
        self._lists: set[str] = set()
        self._buf: dict[tuple[int, str], list[str]] = {}
        # A bulk fold looks ids up in a dict built on first use; a single apply scans back from
        # the end, where the item an event refers to almost always is.
        self._indexed = indexed
        self._index: dict[tuple[str, Any], int] | None = None

    @property
    def items(self) -> list[dict[str, Any]]:
        """Read-only view of the items; write through `item` and `add`."""
        items: list[dict[str, Any]] = self.state["items"]
        return items

    def find(self, kind: str, ident: Any) -> int | None:
        items = self.items
        if not self._indexed:
            field = ID_FIELD[kind]
            for i in range(len(items) - 1, -1, -1):
                item = items[i]
                if item["kind"] == kind and item[field] == ident:
                    return i
            return None
        if self._index is None:
            self._index = {}
            for i, item in enumerate(items):
                key = _item_key(item)
                if key is not None:
                    self._index[key] = i
        return self._index.get((kind, ident))

    def add(self, item: dict[str, Any]) -> int:
        items = self._own_items()
        items.append(item)
        i = len(items) - 1
        self._owned.add(i)
        if self._index is not None:
            key = _item_key(item)
            if key is not None:
                self._index[key] = i
        return i

    def item(self, i: int) -> dict[str, Any]:
        """The item at i, copied first if this transaction has not written it yet."""
        items = self._own_items()
        if i not in self._owned:
            items[i] = dict(items[i])
            self._owned.add(i)
        return items[i]

    def progress(self, i: int) -> list[Any]:
        item = self.item(i)
        if i not in self._progress:
            item["progress"] = list(item.get("progress") or ())
            self._progress.add(i)
        progress: list[Any] = item["progress"]
        return progress

    def top_list(self, name: str) -> list[Any]:
        if name not in self._lists:
            self.state[name] = list(self.state[name])
            self._lists.add(name)
        lst: list[Any] = self.state[name]
        return lst

    def append_text(self, i: int, field: str, text: str) -> None:
        chunks = self._buf.get((i, field))
        if chunks is None:
            self._buf[(i, field)] = [self.item(i)[field], text]
        else:
            chunks.append(text)

    def set_text(self, i: int, field: str, text: str) -> None:
        self._buf.pop((i, field), None)
        self.item(i)[field] = text

    def finish(self) -> State:
        items = self.items
        for (i, field), chunks in self._buf.items():
            items[i][field] = "".join(chunks)
        self._buf.clear()
        return self.state

    def _own_items(self) -> list[dict[str, Any]]:
        if not self._items_owned:
            self.state["items"] = list(self.state["items"])
            self._items_owned = True
        return self.items


def _item_key(item: Mapping[str, Any]) -> tuple[str, Any] | None:
    field = ID_FIELD.get(item["kind"])
    return None if field is None else (item["kind"], item[field])


def plain_json(value: Any) -> Any:
    """Own copy of an event payload, in the shape JSON gives back (lists, str keys)."""
    if isinstance(value, Mapping):
        return {str(k): plain_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain_json(v) for v in value]
    return value


def ident(value: Any) -> Any:
    """Ids are dict keys here and JSON values in the state, so keep them str/int/None."""
    if value is None or isinstance(value, str | int):
        return value
    return str(value)


def as_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    return "" if value is None else str(value)


def as_int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def given(value: Any) -> Any:
    """An event field's value, None when the event had none."""
    return None if value is UNSET else value
