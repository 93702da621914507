-- Trace context (docs/tracing.md): the request's `traceparent` for the session's next run,
-- and the current run's own, written under its lease.

-- name: set_traceparent
UPDATE sessions SET traceparent = :tp WHERE id = :id

-- name: set_run_traceparent
-- Fenced like `commit_head`: a run whose lease is gone matches no row and changes nothing.
UPDATE sessions SET run_traceparent = :tp
WHERE id = :id AND lease_worker = :worker AND fence = :fence AND status = 'running'
RETURNING id
