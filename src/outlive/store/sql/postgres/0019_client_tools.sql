-- Client tools (docs/client-tools.md): the tools a client declared for the session's runs
-- (a JSON list of {name, description, parameters}; NULL: none), and a client tool call's
-- wait on the approvals' machinery: a row of `kind` 'client_tool' per call, decided once by
-- the first result (`result`: {"output": ...} or {"error": ...}), by its timeout (a denial,
-- reason 'expired') or by a cancel (reason 'cancelled'). A session waiting on its client's
-- results has attention 'tool', holds no lease and is no claim candidate.
ALTER TABLE sessions ADD COLUMN client_tools JSONB;
ALTER TABLE approvals ADD COLUMN kind TEXT NOT NULL DEFAULT 'approval'
    CHECK (kind IN ('approval', 'client_tool'));
ALTER TABLE approvals ADD COLUMN result JSONB;
DROP INDEX sessions_lease_ends;
CREATE INDEX sessions_lease_ends ON sessions ((COALESCE(lease_expires_at, '-infinity')))
    WHERE status = 'running' AND (attention IS NULL OR attention NOT IN ('approval', 'tool'))
      AND awaiting_children = 0;
