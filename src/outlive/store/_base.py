"""What both adapters share: the transaction seam, row mapping and the dialect's SQL fragments.

Adapters provide a `Tx` (one open transaction) and a `Dialect`; everything else, including every
rule of the status machine, is written once over them (`_core.py` and the area modules), so
SQLite and PostgreSQL cannot drift apart in behaviour.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, NoReturn, Protocol

from ..domain.budget import parse_budget
from ..domain.client_tools import ClientTool, parse_client_tools
from ..domain.errors import InvalidInput, LeaseLost
from ..domain.model import (
    WAITING_ATTENTION,
    Entry,
    ErrorInfo,
    Event,
    Lease,
    OwnerEvent,
    Session,
    Status,
    TitleState,
)
from ..domain.prices import from_nano
from ..domain.status import LeaseState, Lifecycle
from ..domain.tool_calls import ToolChoice, parse_tool_choice
from ..domain.usage import UsageTotals
from ._port import Notice

__all__ = [
    "Dialect",
    "KeyTaken",
    "Query",
    "QueryHook",
    "Row",
    "Tx",
    "TxState",
    "to_entry",
    "to_event",
    "to_owner_event",
]

Row = Mapping[str, Any]


class KeyTaken(Exception):
    """A write's row collided with a unique key another transaction committed first (both
    adapters translate their driver's error to this). Store-internal: the one caller that
    expects it (a create retried with its key, `_sessions.py`) tries again and finds the
    first row; anywhere else it is a bug, as the driver's error was."""


@dataclass(frozen=True, slots=True)
class Query:
    """A named statement, already in the driver's parameter style (see `_queries.py`)."""

    name: str
    sql: str


QueryHook = Callable[[str], None]
"""Called with each statement's name as a transaction runs it (tests record the hot path)."""


class Tx(Protocol):
    """One open transaction, running named queries."""

    async def fetch(self, query: Query, params: Mapping[str, Any] | None = None) -> list[Row]: ...
    async def execute(self, query: Query, params: Mapping[str, Any] | None = None) -> None:
        """Run a statement whose result nobody reads. PostgreSQL pipelines it: its errors
        surface at the next `fetch` or at commit, still inside the transaction."""
        ...


@dataclass
class TxState:
    """Per-transaction bookkeeping: notices are sent only if the transaction commits."""

    notices: dict[str, Notice] = field(default_factory=dict)
    last_reads: list[tuple[Query, dict[str, Any]]] = field(default_factory=list)
    """Reads that go out with the COMMIT (`read_with_commit`), in the order asked."""
    last_rows: list[list[Row]] = field(default_factory=list)
    """Their rows, one list per read, once the transaction committed."""
    after_commit: list[Notice] | None = None
    """PostgreSQL: the notices left for the notifier once the cancels' hints went out inside
    the transaction (`_pg_payload.split_for_commit`); None: all of them."""

    def read_with_commit(self, query: Query, params: Mapping[str, Any]) -> int:
        """Run `query` last, after every other statement: on PostgreSQL it is sent with the
        COMMIT, so a write that answers with the rows it changed waits one round trip less.
        Returns where its rows will be in `last_rows` after the commit."""
        self.last_reads.append((query, dict(params)))
        return len(self.last_reads) - 1

    def notify(
        self, session_id: str, owner_id: str, *, work: bool = False, events: bool = False,
        owner: bool = False, cancel: bool = False,
    ) -> None:
        old = self.notices.get(session_id)
        if old is not None:
            work, events, owner = work or old.work, events or old.events, owner or old.owner
            cancel = cancel or old.cancel
        self.notices[session_id] = Notice(session_id, owner_id, work, events, owner, cancel)


_PARAM = re.compile(r"(?<![:\w]):([a-z_][a-z0-9_]*)")


def pyformat(sql: str) -> str:
    """`:name` → `%(name)s` for psycopg; leaves `::type` casts alone."""
    return _PARAM.sub(r"%(\1)s", sql.replace("%", "%%"))


class Dialect(Protocol):
    name: str
    now: str
    """SQL expression for the database's current time."""
    epoch: str
    """SQL expression for the database's current time in Unix seconds (a number)."""
    for_update: str
    skip_locked: str

    def secs(self, expr: str) -> str:
        """SQL turning a number of seconds into something addable to a time."""
        ...

    def params(self, sql: str) -> str:
        """`:name` parameters rewritten in the driver's style."""
        ...

    def json(self, value: Any) -> Any: ...
    def json_raw(self, value: Any, raw: bytes | None) -> Any:
        """A JSON column's value in a row for `_insert_rows`, given `value` and its JSON as
        orjson wrote it (None: not written)."""
        ...
    def load_json(self, value: Any) -> Any: ...
    def ts(self, value: Any) -> datetime | None: ...
    def ids(self, ids: Sequence[str]) -> Any: ...
    in_ids: str
    """SQL fragment `IN (…)` over the parameter `:ids`."""


def _ts_required(d: Dialect, value: Any) -> datetime:
    out = d.ts(value)
    if out is None:  # pragma: no cover - NOT NULL columns
        raise ValueError("missing timestamp")
    return out


def lifecycle(row: Row) -> Lifecycle:
    if row["lease_worker"] is None:
        lease = LeaseState.NONE
    elif row["lease_expired"]:
        lease = LeaseState.EXPIRED
    else:
        lease = LeaseState.HELD
    return Lifecycle(
        status=Status(row["status"]),
        attempt=int(row["attempt"]),
        fence=int(row["fence"]),
        lease=lease,
        cancel_requested=row["cancel_requested_at"] is not None,
        deleted=row["deleted_at"] is not None,
        ever_claimed=int(row["fence"]) > 0,
        awaiting=(row["attention"] in WAITING_ATTENTION or bool(row["awaiting_children"]))
        and lease is LeaseState.NONE,
        awaiting_children=bool(row["awaiting_children"]) and lease is LeaseState.NONE,
        compact_requested=row["compact_requested_at"] is not None,
        inputs_waiting=int(row["last_input_seq"]) > int(row["delivered_input_seq"]),
    )


def to_session(d: Dialect, row: Row) -> Session:
    error = None
    if row["error_code"] is not None:
        error = ErrorInfo(row["error_code"], row["error_message"] or "")
    return Session(
        id=row["id"],
        owner_id=row["owner_id"],
        agent=row["agent"],
        model=row["model"],
        title=row["title"],
        title_state=TitleState(row["title_state"]),
        status=Status(row["status"]),
        stage=row["stage"],
        attempt=int(row["attempt"]),
        fence=int(row["fence"]),
        lease_worker=row["lease_worker"],
        lease_expires_at=d.ts(row["lease_expires_at"]),
        cancel_requested_at=d.ts(row["cancel_requested_at"]),
        delivered_input_seq=int(row["delivered_input_seq"]),
        last_seq=int(row["last_seq"]),
        last_input_seq=int(row["last_input_seq"]),
        last_entry_seq=int(row["last_entry_seq"]),
        compacted_through=int(row["compacted_through"]),
        error=error,
        abandon_after=row["abandon_after"],
        watched_at=d.ts(row["watched_at"]),
        metadata=d.load_json(row["metadata"]),
        created_at=_ts_required(d, row["created_at"]),
        updated_at=_ts_required(d, row["updated_at"]),
        deleted_at=d.ts(row["deleted_at"]),
        attention=row["attention"],
        context_tokens=row["context_tokens"],
        context_window=row["context_window"],
        compact_requested_at=d.ts(row["compact_requested_at"]),
        traceparent=row["traceparent"],
        run_traceparent=row["run_traceparent"],
        usage=UsageTotals(
            model_calls=int(row["model_calls"]), tool_calls=int(row["tool_calls"]),
            input_tokens=int(row["input_tokens"]), output_tokens=int(row["output_tokens"]),
            cached_input_tokens=int(row["cached_input_tokens"]),
            reasoning_tokens=int(row["reasoning_tokens"]),
            cost_usd=from_nano(int(row["cost_nano_usd"])),
            unpriced_calls=int(row["unpriced_calls"])),
        budget=parse_budget(d.load_json(row["budget"])),
        parent_id=row["parent_id"], root_id=row["root_id"],
        parent_call_id=row["parent_call_id"], depth=int(row["depth"]),
        client_tools=client_tools_of(d.load_json(row["client_tools"])),
        tool_choice=tool_choice_of(d.load_json(row["tool_choice"])),
        forked_from_id=row["forked_from_id"],
        forked_from_seq=None if row["forked_from_seq"] is None else int(row["forked_from_seq"]),
        fork_root_id=row["fork_root_id"],
        end_user=row["end_user"],
    )


def tool_choice_of(raw: object) -> ToolChoice | None:
    """A row's tool choice (checked when written; an unreadable value reads as none)."""
    if not isinstance(raw, dict):
        return None
    try:
        choice = parse_tool_choice(raw.get("mode") if raw.get("mode") != "tool"
                                   else {"name": raw.get("name")})
    except InvalidInput:
        return None
    return None if choice.mode == "auto" else choice


def client_tools_of(raw: object) -> tuple[ClientTool, ...]:
    """A row's client tools (checked when written; an unreadable value reads as none)."""
    try:
        return parse_client_tools(raw)
    except InvalidInput:
        return ()


def to_event(d: Dialect, row: Row) -> Event:
    return Event(
        session_id=row["session_id"],
        seq=int(row["seq"]),
        ts=_ts_required(d, row["ts"]),
        attempt=int(row["attempt"]),
        fence=int(row["fence"]),
        type=row["type"],
        data=d.load_json(row["data"]),
    )


def to_entry(d: Dialect, row: Row) -> Entry:
    return Entry(
        session_id=row["session_id"],
        seq=int(row["seq"]),
        kind=row["kind"],
        data=d.load_json(row["data"]),
        fence=int(row["fence"]),
    )


def to_owner_event(d: Dialect, row: Row) -> OwnerEvent:
    return OwnerEvent(
        owner_id=row["owner_id"],
        id=int(row["id"]),
        session_id=row["session_id"],
        ts=_ts_required(d, row["ts"]),
        type=row["type"],
        data=d.load_json(row["data"]),
    )


def epoch(value: float | None) -> datetime | None:
    return None if value is None else datetime.fromtimestamp(float(value), UTC)


TEXT_REF = "$entry"
"""In a compacted `message_end`, `{"text": {"$entry": seq}}` stands for the text of the
assistant entry at `seq`, which holds the same answer (docs/retention.md)."""


def entry_ref(event: Event) -> int | None:
    """The entry seq a compacted `message_end` takes its text from (None: it has its own)."""
    return text_ref(event.data) if event.type == "message_end" else None


def text_ref(holder: Any) -> int | None:
    text = holder.get("text") if isinstance(holder, dict) else None
    if isinstance(text, dict) and isinstance(text.get(TEXT_REF), int):
        return int(text[TEXT_REF])
    return None


def lease_lost(lease: Lease) -> LeaseLost:
    return LeaseLost(
        f"session {lease.session_id} is no longer held by {lease.worker} at fence {lease.fence}"
    )


def raise_lost(lease: Lease) -> NoReturn:
    raise lease_lost(lease)
