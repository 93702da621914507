-- Sub-agents (docs/subagents.md): a child session knows its parent, its tree's root, the
-- parent's delegation tool call it answers (unique per parent: a call starts one child, however
-- often its spawn is written) and its depth. A parent waiting on its children holds no lease
-- (`awaiting_children`, 1 while it waits); `parent_report` is the outcome a child gave its
-- parent's call, written once, by the transaction of the child's first end. A `detached`
-- child's parent does not wait: its report goes to the parent as a message, once
-- (`report_posted`), by the worker's scan. A waiting parent
-- is no claim candidate: the index of the running sessions a claim may take leaves it out.
ALTER TABLE sessions ADD COLUMN parent_id TEXT;
ALTER TABLE sessions ADD COLUMN root_id TEXT;
ALTER TABLE sessions ADD COLUMN parent_call_id TEXT;
ALTER TABLE sessions ADD COLUMN depth INTEGER NOT NULL DEFAULT 0;
ALTER TABLE sessions ADD COLUMN awaiting_children INTEGER NOT NULL DEFAULT 0;
ALTER TABLE sessions ADD COLUMN parent_report JSONB;
ALTER TABLE sessions ADD COLUMN detached INTEGER NOT NULL DEFAULT 0;
ALTER TABLE sessions ADD COLUMN report_posted INTEGER NOT NULL DEFAULT 0;
CREATE UNIQUE INDEX sessions_parent_call ON sessions (parent_id, parent_call_id);
CREATE INDEX sessions_reports_due ON sessions (id)
    WHERE detached = 1 AND parent_report IS NOT NULL AND report_posted = 0;
DROP INDEX sessions_lease_ends;
CREATE INDEX sessions_lease_ends ON sessions ((COALESCE(lease_expires_at, '-infinity')))
    WHERE status = 'running' AND (attention IS NULL OR attention <> 'approval')
      AND awaiting_children = 0;
