-- Traces (docs/tracing.md): the W3C `traceparent` of the request that created the session or
-- posted the message that starts its next run (NULL: none, the run starts a trace of its own),
-- and that of the current run's `invoke_agent` span, written under the run's lease, so a worker
-- taking the session over continues the same trace and links the attempt it lost.
ALTER TABLE sessions ADD COLUMN traceparent TEXT;
ALTER TABLE sessions ADD COLUMN run_traceparent TEXT;
