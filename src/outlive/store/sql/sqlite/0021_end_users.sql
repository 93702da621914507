-- End users (docs/end-users.md): the opaque id of the person an application serves a session
-- for (set on create, or carried by a browser token). A session list, a token's view and the
-- usage grouping filter by (owner_id, end_user). A usage ledger row keeps its session's end
-- user, as it keeps its agent: the ledger outlives a purge of the session.
ALTER TABLE sessions ADD COLUMN end_user TEXT;
ALTER TABLE usage_ledger ADD COLUMN end_user TEXT;
CREATE INDEX sessions_owner_end_user ON sessions (owner_id, end_user, id DESC)
    WHERE deleted_at IS NULL AND end_user IS NOT NULL;
