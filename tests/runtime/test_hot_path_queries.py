"""The statements one demo session costs, by name: the hot path, written down.

A session 'hi' at demo speed 0 (two model turns, one tool call) is created, then run by a real
Worker on its own Store instance, whose every statement is recorded through the Tx seam's
hook. The lists below are exact: a statement added to or dropped from this path fails here,
and the change should say why. Timers are pushed out of the way (no heartbeat, abandon scan
or backstop during the run, no webhook scans), so what is recorded is the work itself.
"""

from __future__ import annotations

from outlive.domain import Status
from tests.support.sessions import settled
from tests.support.waiting import eventually


def create_statements(dialect: str) -> list[str]:
    """`create_session` with a prompt: one transaction (no NOTIFY in it on PostgreSQL: the
    notifier sends the hint after the COMMIT, on its own connection). The row
    is inserted with its prompt's seq (1), the prompt stamped by its own INSERT, and the new
    session read with the COMMIT: on PostgreSQL everything after the owner check goes out in
    the COMMIT's flush, so the commit, and with it the workers' notice, follows the INSERT
    without a round trip between them."""
    # the owner check is the quotas' admission (docs/quotas.md): on PostgreSQL one statement
    # with this minute's creates and the queued sessions, on SQLite three
    admit = (["admit_create"] if dialect == "postgres"
             else ["admit_create", "bump_create_window", "count_queued"])
    # the owner's event: on PostgreSQL one INSERT without an id (numbered after the commit,
    # by whoever reads the owner's log first: no owner row updated, so no lock on it)
    owned = (["insert_pending_owner_events"] if dialect == "postgres"
             else ["next_owner_event_id", "insert_owner_event"])
    return [
        *admit, "insert_session", "insert_events_now", *owned, "get_session",
    ]


def run_statements(dialect: str) -> list[str]:
    """What the worker runs, transaction by transaction. No transaction sends a NOTIFY:
    on PostgreSQL the Store's notifier sends each commit's hints after it, outside."""
    # claim: take the session and lease it (one UPDATE), write session_start (stamped by its
    # INSERT, after the lease; the first event is durable at the claim's commit), tell its
    # owner, and read the sessions as taken and the prompts waiting with the COMMIT (so the
    # run need not). On PostgreSQL the candidates' statement takes a new session and writes
    # its session_start itself (`claim_take`): the first event is stamped in the claim's
    # only round trip before its COMMIT; planned, whatever the statistics, as the ordered
    # scan that stops at its limit (`claim_plan`, for the claim's transaction).
    # On PostgreSQL a write's entries and events go in one statement, and an owner's events
    # in one INSERT without ids (numbered after the commit: no owner row to update or wait on).
    if dialect == "postgres":
        claim = look = ["claim_plan", "claim_take"]
        logs, owned = ["insert_entries_and_events"], ["insert_pending_owner_events"]
        ledger = totals = ["write_ledger"]  # the rows and the totals in one statement
    else:
        claim = ["claim_candidates", "update_lifecycle", "insert_events_now"]
        look = ["claim_candidates"]
        logs = ["insert_session_entries", "insert_session_events"]
        owned = ["next_owner_event_id", "insert_owner_event"]
        ledger, totals = ["insert_ledger_row", "add_session_usage"], ["add_session_usage"]
    return [
        *claim, *owned, "claimed_sessions", "claimed_inputs",
        # commit 1 (through the worker's group commit, alone here): the first turn and the
        # automatic title, both set by the one head statement (which takes the seq of the
        # title's event too, after the turn's; its event in the commit's INSERT), then its
        # owner event (the owner's only one in this transaction: no reservation on SQLite)
        "commit_heads", *logs, *owned,
        # before the first model call, which owners have a monthly budget: read once per 2 s
        # by each worker, whatever its runs (none here, so no call is admitted one by one)
        "owners_with_budgets",
        # commit 2: the model's answer and the tool call; the answer's model call in the
        # usage ledger and the session's totals (written with the entry, so exactly once;
        # one statement for all on PostgreSQL)
        "commit_heads", *logs, *ledger,
        # commit 3: the tool result (counted in the session's totals) and the second turn
        "commit_heads", *logs, *totals,
        # settle (through the group commit too, as a `Settle` item): the rows of the settles
        # locked in one statement, which also says whether their owners have a webhook
        # endpoint (none here: no outbox statement); every end in one UPDATE for all (status,
        # and the seqs of the final answer and session_end, at those the locked row names);
        # the final answer and session_end, the answer's call in the ledger and the totals;
        # the owner's session_status
        "lock_sessions", "settle_rows", *logs, *ledger, *owned,
        # the settled sessions, read with the COMMIT (no round trip of its own on PostgreSQL)
        "settled_sessions",
        # the worker, free again, looks for more work
        *look,
    ]


async def test_one_demo_session_runs_exactly_these_statements(store, store_factory, workers,
                                                              owner):
    created: list[str] = []
    store.on_query = created.append
    s = await store.create_session(owner, agent="demo", model="demo:scripted", prompt="hi")
    store.on_query = None
    assert created == create_statements(store.dialect)

    worker_store = await store_factory()
    ran: list[str] = []
    worker_store.on_query = ran.append
    w = await workers.start(store=worker_store, concurrency=1, lease_ttl=120.0,
                            heartbeat_interval=60.0, abandon_check_interval=60.0,
                            backstop_interval=None, webhooks=False, schedules=False)
    assert (await settled(store, s.id)).status is Status.SUCCEEDED

    look = "claim_take" if store.dialect == "postgres" else "claim_candidates"

    async def looked_again() -> bool:
        return ran.count(look) == 2

    await eventually(looked_again)
    await workers.stop(w)
    assert ran == run_statements(store.dialect), ran
