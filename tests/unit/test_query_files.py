"""The named-query files: how they are parsed and rendered, and that the code and the files
agree (every query the code names exists for its dialect; no query is left unused). Whether
each query is valid SQL on each database is tests/store/test_named_queries.py."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import outlive.store
from outlive.store._queries import Queries, load_sources, parse_queries, queries_for, render
from outlive.store.postgres import PostgresDialect
from outlive.store.sqlite import SqliteDialect

STORE = Path(outlive.store.__file__).parent
DIALECTS = {"sqlite": SqliteDialect(), "postgres": PostgresDialect()}
ADAPTER_FILES = {"sqlite": "sqlite.py", "postgres": "postgres.py"}
PG_PARTS = "_pg_*.py"
"""PostgreSQL's own modules (`_pg_owner_log.py`...): part of its adapter, not shared code."""
_USE = re.compile(r"\bself\.q\.([a-z][a-z0-9_]*)\b")


def names_used(path: Path) -> set[str]:
    return set(_USE.findall(path.read_text("utf-8"))) - {"dynamic", "all"}


def test_blocks_are_split_by_name_with_comments_dropped_and_whitespace_folded():
    text = """-- a file comment
-- name: first
-- what it does
SELECT a
  FROM t   WHERE x = :x

-- name: second
-- dialect: postgres
SELECT 1
"""
    (a, b) = parse_queries(text, "f.sql")
    assert (a.name, a.dialect, a.text) == ("first", None, "SELECT a FROM t WHERE x = :x")
    assert (b.name, b.dialect, b.text) == ("second", "postgres", "SELECT 1")


@pytest.mark.parametrize("text", [
    "SELECT 1\n-- name: late\nSELECT 2",
    "-- name: empty\n-- only a comment\n",
    "-- name: odd\n-- dialect: oracle\nSELECT 1",
])
def test_malformed_files_are_refused(text):
    with pytest.raises(ValueError):
        parse_queries(text, "f.sql")


def test_fragments_render_per_dialect_with_parameters_in_the_driver_style():
    sql = "SELECT {session_row} FROM sessions s WHERE s.id {in_ids} AND {now} > {secs(:ttl)} " \
          "{for_update}"
    lite = render(sql, DIALECTS["sqlite"])
    pg = render(sql, DIALECTS["postgres"])
    assert "julianday('now')" in lite and ":ttl" in lite and "json_each(:ids)" in lite
    assert not lite.endswith(" ")
    assert pg == (
        "SELECT s.*, (s.lease_expires_at < clock_timestamp()) AS lease_expired FROM sessions s "
        "WHERE s.id = ANY(%(ids)s) AND clock_timestamp() > ((%(ttl)s) * interval '1 second') "
        "FOR UPDATE"
    )


@pytest.mark.parametrize("bad", ["{nowish}", "{secs}", "{now(1)}"])
def test_an_unknown_fragment_is_refused(bad):
    with pytest.raises(ValueError, match="unknown SQL fragment"):
        render(f"SELECT {bad}", DIALECTS["sqlite"])


def test_a_name_defined_twice_is_refused():
    sources = parse_queries("-- name: a\nSELECT 1\n-- name: a\nSELECT 2", "f.sql")
    with pytest.raises(ValueError, match="defined twice"):
        Queries(DIALECTS["sqlite"], sources)
    sources = parse_queries("-- name: a\nSELECT 1\n-- name: a\n-- dialect: sqlite\nSELECT 2",
                            "f.sql")
    with pytest.raises(ValueError, match="defined twice"):
        Queries(DIALECTS["sqlite"], sources)
    with pytest.raises(ValueError, match="cannot name a query"):
        Queries(DIALECTS["sqlite"], parse_queries("-- name: dynamic\nSELECT 1", "f.sql"))


def test_queries_render_once_per_dialect_and_unknown_names_say_so():
    for d in DIALECTS.values():
        assert queries_for(d) is queries_for(type(d)())
    q = queries_for(DIALECTS["postgres"])
    with pytest.raises(AttributeError, match="no query named 'nope' for postgres"):
        _ = q.nope
    assert q.dynamic("x", "SELECT :a") is q.dynamic("x", "SELECT :a")
    assert q.dynamic("x", "SELECT :a").sql == "SELECT %(a)s"


@pytest.mark.parametrize("dialect", DIALECTS)
def test_every_rendered_query_is_complete(dialect):
    for query in queries_for(DIALECTS[dialect]).all():
        assert "{" not in query.sql and "}" not in query.sql, query.name
        if dialect == "postgres":
            assert not re.search(r"(?<![:\w]):[a-z]", query.sql), query.name


def test_every_query_the_code_names_exists_and_every_query_is_used():
    pg_parts = set(STORE.glob(PG_PARTS))
    shared = set().union(*(names_used(p) for p in set(STORE.glob("_*.py")) - pg_parts))
    used_by = {d: shared | names_used(STORE / f) for d, f in ADAPTER_FILES.items()}
    used_by["postgres"] |= set().union(*(names_used(p) for p in pg_parts))
    for dialect, used in used_by.items():
        defined = {q.name for q in queries_for(DIALECTS[dialect]).all()}
        assert used - defined == set(), f"{dialect}: named in code but not in a query file"
        assert defined - used == set(), f"{dialect}: defined but never used"
    # a query written for one dialect only is used only by its adapter (a query with a text
    # of its own for every dialect may be named by the shared code)
    written_for: dict[str, set[str | None]] = {}
    for src in load_sources():
        written_for.setdefault(src.name, set()).add(src.dialect)
    for name, dialects in written_for.items():
        if None not in dialects and dialects != set(ADAPTER_FILES):
            assert name not in shared, name
