-- Owner budgets (docs/usage.md): an owner's caps per calendar month (UTC) on what all its
-- sessions' model calls use, as a JSON object (NULL: none).
ALTER TABLE owners ADD COLUMN monthly_budget JSONB;

-- What each model call in flight may use at most, held against its owner's monthly budget
-- from its admission until its entry is written. A hold counts while its run still holds the
-- session (same fence, lease not expired) and the session's `model_calls` is still what it was
-- when the call was admitted (the call's ledger row adds one): a crashed run's hold, or one
-- whose call was written, counts for nothing, with no statement to take it back. One per
-- session (a run makes one model call at a time), replaced by the next admission.
CREATE TABLE budget_holds (
    session_id    TEXT PRIMARY KEY,
    owner_id      TEXT NOT NULL,
    fence         BIGINT NOT NULL,
    model_calls   INTEGER NOT NULL,
    tokens        BIGINT NOT NULL,
    cost_nano_usd BIGINT NOT NULL,
    created_at    TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE INDEX budget_holds_owner ON budget_holds (owner_id);
