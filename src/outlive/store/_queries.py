"""Named queries: the Store's SQL, kept in `sql/queries/*.sql` and rendered once per dialect.

A file holds blocks, each opened by a `-- name: some_query` line (and, for the rare statement
one database needs written its own way, a `-- dialect: sqlite|postgres` line). Text in braces
is a dialect fragment:

* `{now}`: the database clock (`{epoch}`: in Unix seconds); `{for_update}`, `{skip_locked}`:
  the row-locking tails
  (empty on SQLite, whose write transactions lock the whole file);
* `{secs(expr)}`: a number of seconds made addable to a time;
* `{in_ids}`: `IN` over the list parameter `:ids`;
* `{session_row}`: a session's columns plus `lease_expired`.

Parameters are `:name`; rendering also converts them to the driver's style, so a call site
pays nothing per call: it names a query (`self.q.get_session`) and passes parameters.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from importlib import resources

from ._base import Dialect, Query

__all__ = ["Queries", "parse_queries", "queries_for", "render"]

_NAME = re.compile(r"^--\s*name:\s*([a-z][a-z0-9_]*)\s*$")
_DIALECT = re.compile(r"^--\s*dialect:\s*(\w+)\s*$")
_FRAGMENT = re.compile(r"\{([a-z_]+)(?:\(([^(){}]*)\))?\}")
_DIALECTS = ("sqlite", "postgres")
_SESSION_ROW = "s.*, (s.lease_expires_at < {now}) AS lease_expired"


@dataclass(frozen=True)
class Source:
    """One block of a query file, before rendering."""

    name: str
    dialect: str | None
    text: str
    origin: str


def parse_queries(text: str, origin: str) -> list[Source]:
    """Split one file into its named blocks. Comment lines are dropped and whitespace runs
    become one space (no query holds a literal where that would matter)."""
    out: list[Source] = []
    name: str | None = None
    dialect: str | None = None
    body: list[str] = []

    def close() -> None:
        sql = " ".join(" ".join(body).split())
        if name is not None:
            if not sql:
                raise ValueError(f"{origin}: query {name} is empty")
            out.append(Source(name, dialect, sql, origin))

    for line in text.splitlines():
        stripped = line.strip()
        if (m := _NAME.match(stripped)) is not None:
            close()
            name, dialect, body = m.group(1), None, []
        elif (d := _DIALECT.match(stripped)) is not None and name is not None and not body:
            if d.group(1) not in _DIALECTS:
                raise ValueError(f"{origin}: query {name} names unknown dialect {d.group(1)}")
            dialect = d.group(1)
        elif stripped.startswith("--") or not stripped:
            continue
        elif name is None:
            raise ValueError(f"{origin}: SQL before the first '-- name:' line")
        else:
            body.append(stripped)
    close()
    return out


def render(text: str, d: Dialect) -> str:
    """Fill in the dialect's fragments and convert parameters to the driver's style."""
    fragments: dict[str, Callable[[str | None], str]] = {
        "now": lambda _: d.now,
        "epoch": lambda _: d.epoch,
        "for_update": lambda _: d.for_update,
        "skip_locked": lambda _: d.skip_locked,
        "in_ids": lambda _: d.in_ids,
        "session_row": lambda _: _SESSION_ROW.replace("{now}", d.now),
        "secs": lambda arg: d.secs(arg or ""),
    }

    def fill(m: re.Match[str]) -> str:
        key, arg = m.group(1), m.group(2)
        if key not in fragments or (arg is None) == (key == "secs"):
            raise ValueError(f"unknown SQL fragment {m.group(0)!r}")
        return fragments[key](arg)

    return d.params(" ".join(_FRAGMENT.sub(fill, text).split()))


class Queries:
    """A dialect's rendered queries as attributes; `dynamic` for SQL built at run time."""

    def __init__(self, d: Dialect, sources: Iterable[Source]) -> None:
        self.dialect = d.name
        self._d = d
        self._queries: dict[str, Query] = {}
        self._dynamic: dict[tuple[str, str], Query] = {}
        generic: set[str] = set()
        for src in sources:
            if src.dialect not in (None, d.name):
                continue
            if src.name in _RESERVED:
                raise ValueError(f"{src.origin}: {src.name!r} cannot name a query")
            if src.name in self._queries or (src.dialect is not None and src.name in generic):
                raise ValueError(f"{src.origin}: query {src.name} is defined twice")
            if src.dialect is None:
                generic.add(src.name)
            self._queries[src.name] = Query(src.name, render(src.text, d))
        self.__dict__.update(self._queries)

    def __getattr__(self, name: str) -> Query:
        """Only reached for a name no query file defines."""
        raise AttributeError(f"no query named {name!r} for {self.dialect}")

    def all(self) -> list[Query]:
        return list(self._queries.values())

    def dynamic(self, name: str, sql: str) -> Query:
        """SQL assembled at run time (a variable SET list, a multi-row VALUES), converted to
        the driver's style once per distinct text."""
        query = self._dynamic.get((name, sql))
        if query is None:
            query = self._dynamic[name, sql] = Query(name, self._d.params(sql))
        return query


_RESERVED = frozenset({"dialect", "all", "dynamic"})
_RENDERED: dict[str, Queries] = {}


def load_sources() -> list[Source]:
    folder = resources.files("outlive.store").joinpath("sql", "queries")
    out: list[Source] = []
    for item in sorted(folder.iterdir(), key=lambda i: i.name):
        if item.name.endswith(".sql"):
            out.extend(parse_queries(item.read_text("utf-8"), f"queries/{item.name}"))
    return out


def queries_for(d: Dialect) -> Queries:
    """The dialect's queries, rendered on first use and shared by every store after."""
    queries = _RENDERED.get(d.name)
    if queries is None:
        queries = _RENDERED[d.name] = Queries(d, load_sources())
    return queries
