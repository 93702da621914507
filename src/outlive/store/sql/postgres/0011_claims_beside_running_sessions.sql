-- A claim looks for queued sessions and for running ones nobody holds (parked, or their lease
-- lapsed). Through `sessions_claimable` it walked every running session in id order to find
-- them, a cost that grew with the sessions running (0.55 ms per claim with 2,000 running, on
-- every claim of every idle worker). Two indexes replace it, through which a claim reads only
-- what it takes: the queued sessions in id order, and the running ones a claim may take (not
-- those waiting on an approval) by the end of their lease (no lease: minus infinity). No other
-- index's condition follows from the claim's, so the planner cannot walk the running sessions
-- in another order instead. The abandon sweep gets its own. A lease is whole or absent, which
-- the search for the sessions nobody holds relies on.
ALTER TABLE sessions ADD CONSTRAINT sessions_lease_whole
    CHECK ((lease_worker IS NULL) = (lease_expires_at IS NULL));
DROP INDEX sessions_claimable;
CREATE INDEX sessions_queued ON sessions (id) WHERE status = 'queued';
CREATE INDEX sessions_lease_ends ON sessions ((COALESCE(lease_expires_at, '-infinity')))
    WHERE status = 'running' AND (attention IS NULL OR attention <> 'approval');
CREATE INDEX sessions_abandonable ON sessions (id)
    WHERE status = 'running' AND abandon_after IS NOT NULL;
