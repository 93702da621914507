"""Every named query is valid SQL on its database: each is planned (never run) with its
parameters bound, `EXPLAIN` on PostgreSQL and `EXPLAIN QUERY PLAN` on SQLite, so a typo in a
table or column name fails here rather than on the code path that happens to use it."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

import pytest

from outlive.store._base import Query
from outlive.store._queries import render

_PARAM = re.compile(r"(?<![:\w]):([a-z_][a-z0-9_]*)|%\(([a-z_][a-z0-9_]*)\)s")


def samples(store: Any) -> dict[str, Any]:
    """A value of the right kind for every parameter name the query files use."""
    d = store.d
    pg = d.name == "postgres"
    return {
        "abandon": 60.0, "after": 0, "afters": [0], "attention": None,
        "agent": "demo", "at": datetime.now(UTC) if pg else 0.0,
        "at_most": 10,
        "channel": "outlive", "chat": "chat-1", "crid": "c1", "cur": 0, "cursor": None, "d": 1,
        "ct": 2310, "cw": None, "cc": True,
        "data": d.json({}), "delivery": "steer", "ds": [1], "fence": 1, "fences": [1],
        "hash": "h", "items": '[["ses_1", "w1", 1, 1, 1, 1, null]]', "nes": [1], "nns": [1],
        "workers": ["w1"], "titles": [None], "statuses": ["succeeded"], "attempts": [1],
        "codes": [None], "messages": [None], "attentions": [None], "last_seqs": [1],
        "last_entry_seqs": [1],
        "id": "1", "ids": d.ids(["ses_1"]), "label": None, "last": 1, "limit": 10,
        "metadata": d.json({}), "model": "demo:scripted", "n": 1, "name": "alice", "ne": 1,
        "nn": 1, "owner": "own_1", "from_owner": "", "pairs": '[["ses_1", 1]]', "payloads": ["[]"],
        "channels": ["outlive"],
        "requeued": False, "start": True, "max_attempts": 5,
        "rows": '[{"session_id": "ses_1", "seq": 1, "attempt": 1, "fence": 1, "data": {}}]',
        "seq": 1, "sid": "ses_1", "stage": "s", "state": d.json({}),
        "status": None, "t": "title", "title": None, "title_state": "pending", "ttl": 1.5,
        "type": "session_title", "worker": "w1",
        # sub-agents (children.sql, sessions.sql)
        "parent": None, "root": None, "depth": 0, "report": d.json({"status": "succeeded"}),
        "detached": 0,
        # budgets (sessions.sql)
        "budget": d.json({"max_model_calls": 1}),
        # traces.sql
        "tp": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
        # bounded storage (retention.sql)
        "age": 60.0, "grace": 60.0, "keep": 1000, "from": 0, "upto": 10, "floor": 60.0,
        "lo": 1, "hi": 10, "secs": 60.0,
        "token": "t", "key": "key_1", "idle": 60.0, "max_age": 60.0,
        # approvals.sql
        "args": d.json({}), "call_id": "call_1", "tool": "t", "decision": "approve",
        "reason": None, "always": False,
        # client tools (approvals.sql, sessions.sql)
        "result": d.json({"output": 1}), "client_tools": d.json([]),
        "choice": d.json({"mode": "required", "name": None}),
        # branches (branches.sql)
        "new": "ses_2", "last_seq": 1, "last_input": 1, "last_entry": 1, "compacted": 0,
        "from_seq": 1,
        # end users (sessions.sql, usage.sql)
        "end_user": None,
        # webhooks (webhooks.sql)
        "url": "https://example.com/h", "events": ",session.failed,", "secret": "whsec_x",
        "msg": "msg_1", "event": "session.failed", "body": "{}", "pattern": "%,x,%",
        "wid": "wh_1", "lease": 30.0, "attempt": 1, "delay": 1.0, "error": None,
        "outcome": "delivered", "after_id": "", "old": "whsec_y",
        # the usage ledger (usage.sql)
        "idx": 0, "kind": "model", "route": "openai:gpt-4o", "input": 10, "output": 2,
        "cached": 0, "reasoning": 0, "estimated": False, "latency": 5, "cost": None,
        "calls": 1, "tools": 0, "unpriced": 1, "grp": "day",
        "sums": '[{"sid": "ses_1", "calls": 1, "tools": 0, "input": 1, "output": 1, '
                '"cached": 0, "reasoning": 0, "cost": 0, "unpriced": 0}]',
        # owner budgets (budgets.sql)
        "tokens": 100,
        # time (schedules.sql)
        "deliver": 1.0, "call": "call_1", "text": "hello", "mode": "steer", "now": 1.0,
        "cron": None, "every": 60, "anchor": 0, "tz": "UTC", "prompt": "hi", "target": None,
        "overlap": "skip", "catch_up": "one", "paused": False, "next": 60, "no": False,
        "fire": 60, "pending": None, "before": None, "caught_up": False,
        # fair claims and quotas (runs.sql, quotas.sql)
        "rotate": "", "rotate_eu": "", "cap_running": 1000, "cap_eu_running": 64,
        "cap_queued": 10000, "cap_eu_queued": 1000, "cap_cpm": 600, "cap_eu_cpm": 60,
        "cap_history": 16777216, "prompt_bytes": 5,
        "quotas": d.json({"running": 1}), "input_bytes": 0, "bytes": 2,
    }


def params_of(query: Query, values: dict[str, Any]) -> dict[str, Any]:
    names = {a or b for a, b in _PARAM.findall(query.sql)}
    missing = names - set(values)
    assert not missing, f"{query.name}: add a sample value for {sorted(missing)}"
    return {k: values[k] for k in names}


async def plan(store: Any, query: Query) -> None:
    """Plan `query` on the store's own connection; raises what the database says."""
    prefix = "EXPLAIN " if store.dialect == "postgres" else "EXPLAIN QUERY PLAN "
    explained = Query(f"explain {query.name}", prefix + query.sql)
    params = params_of(query, samples(store))
    await store._read(lambda tx: tx.fetch(explained, params))


async def test_every_named_query_is_planned_on_its_database(store):
    queries = store.q.all()
    assert len(queries) > 40
    failures = {}
    for query in queries:
        try:
            await plan(store, query)
        except Exception as exc:
            failures[query.name] = f"{type(exc).__name__}: {exc}"
    assert failures == {}


@pytest.mark.parametrize(("broken", "error"), [
    ("SELECT titel FROM sessions s WHERE s.id = :id", "titel"),
    ("UPDATE sessions SET stage = :stage WHERE idd = :id", "idd"),
    ("INSERT INTO session_event (session_id) VALUES (:sid)", "session_event"),
    ("SELECT {session_row} FROM sessions WHERE id = :id", "table: s|table \"s\""),
])
async def test_a_broken_query_fails_the_check(store, broken, error):
    with pytest.raises(Exception, match=error):
        await plan(store, Query("broken", render(broken, store.d)))
