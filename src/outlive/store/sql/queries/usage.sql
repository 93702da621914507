-- The usage ledger (docs/usage.md): one row per model call in a session's history, written
-- with the entry it is keyed by, and the session's running totals beside it.

-- name: insert_ledger_row
-- Owner, agent and end user from the session row, which the writing transaction holds already.
INSERT INTO usage_ledger (session_id, entry_seq, owner_id, attempt, fence, call_index, kind,
                          route, model, agent, input_tokens, output_tokens, cached_input_tokens,
                          reasoning_tokens, estimated, latency_ms, cost_nano_usd, created_at,
                          end_user)
-- The casts type the parameters for PostgreSQL (a NULL cost is otherwise text).
SELECT s.id, CAST(:seq AS bigint), s.owner_id, CAST(:attempt AS integer),
       CAST(:fence AS bigint), CAST(:idx AS integer), :kind, :route, :model, s.agent,
       CAST(:input AS bigint), CAST(:output AS bigint), CAST(:cached AS bigint),
       CAST(:reasoning AS bigint),
       :estimated, CAST(:latency AS integer), CAST(:cost AS bigint), {now}, s.end_user
FROM sessions s WHERE s.id = :sid

-- name: add_session_usage
UPDATE sessions SET model_calls = model_calls + :calls, tool_calls = tool_calls + :tools,
                    input_tokens = input_tokens + :input,
                    output_tokens = output_tokens + :output,
                    cached_input_tokens = cached_input_tokens + :cached,
                    reasoning_tokens = reasoning_tokens + :reasoning,
                    cost_nano_usd = cost_nano_usd + :cost,
                    unpriced_calls = unpriced_calls + :unpriced
WHERE id = :sid

-- name: write_ledger
-- dialect: postgres
-- A transaction's ledger rows and its sessions' totals in one statement: the totals added by
-- the UPDATE (whose rows the writing transaction holds already), the rows inserted with the
-- owner and agent it returns. SQLite runs `insert_ledger_row` and `add_session_usage`.
WITH t AS (
  UPDATE sessions s
  SET model_calls = s.model_calls + a.calls, tool_calls = s.tool_calls + a.tools,
      input_tokens = s.input_tokens + a.input, output_tokens = s.output_tokens + a.output,
      cached_input_tokens = s.cached_input_tokens + a.cached,
      reasoning_tokens = s.reasoning_tokens + a.reasoning,
      cost_nano_usd = s.cost_nano_usd + a.cost, unpriced_calls = s.unpriced_calls + a.unpriced
  FROM jsonb_to_recordset(CAST(:sums AS jsonb)) AS a(sid text, calls integer, tools integer,
       input bigint, output bigint, cached bigint, reasoning bigint, cost bigint,
       unpriced integer)
  WHERE s.id = a.sid
  RETURNING s.id, s.owner_id, s.agent, s.end_user)
INSERT INTO usage_ledger (session_id, entry_seq, owner_id, attempt, fence, call_index, kind,
                          route, model, agent, input_tokens, output_tokens, cached_input_tokens,
                          reasoning_tokens, estimated, latency_ms, cost_nano_usd, created_at,
                          end_user)
SELECT r.sid, r.seq, t.owner_id, r.attempt, r.fence, r.idx, r.kind, r.route, r.model, t.agent,
       r.input, r.output, r.cached, r.reasoning, r.estimated, r.latency, r.cost, {now},
       t.end_user
FROM jsonb_to_recordset(CAST(:rows AS jsonb)) AS r(sid text, seq bigint, attempt integer,
     fence bigint, idx integer, kind text, route text, model text, input bigint,
     output bigint, cached bigint, reasoning bigint, estimated boolean, latency integer,
     cost bigint)
JOIN t ON t.id = r.sid

-- name: session_ledger
SELECT * FROM usage_ledger WHERE session_id = :sid ORDER BY entry_seq

-- name: usage_report
-- dialect: sqlite
-- `:lo` and `:hi` are epoch seconds, the half-open period [lo, hi). Grouped by end user,
-- the calls of sessions without one make the last group, its key NULL.
SELECT CASE :grp WHEN 'model' THEN route WHEN 'agent' THEN agent
                 WHEN 'session' THEN session_id WHEN 'end_user' THEN end_user
                 ELSE strftime('%Y-%m-%d', created_at, 'unixepoch') END AS k,
       COUNT(*) AS model_calls, SUM(input_tokens) AS input_tokens,
       SUM(output_tokens) AS output_tokens, SUM(cached_input_tokens) AS cached_input_tokens,
       SUM(reasoning_tokens) AS reasoning_tokens, COALESCE(SUM(cost_nano_usd), 0) AS cost,
       SUM(CASE WHEN cost_nano_usd IS NULL THEN 1 ELSE 0 END) AS unpriced_calls
FROM usage_ledger
WHERE owner_id = :owner AND created_at >= :lo AND created_at < :hi
  AND (CAST(:end_user AS TEXT) IS NULL OR end_user = :end_user)
GROUP BY k ORDER BY k IS NULL, k

-- name: usage_report
-- dialect: postgres
SELECT CASE CAST(:grp AS text) WHEN 'model' THEN route WHEN 'agent' THEN agent
                 WHEN 'session' THEN session_id WHEN 'end_user' THEN end_user
                 ELSE to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD') END AS k,
       COUNT(*) AS model_calls, SUM(input_tokens) AS input_tokens,
       SUM(output_tokens) AS output_tokens, SUM(cached_input_tokens) AS cached_input_tokens,
       SUM(reasoning_tokens) AS reasoning_tokens, COALESCE(SUM(cost_nano_usd), 0) AS cost,
       SUM(CASE WHEN cost_nano_usd IS NULL THEN 1 ELSE 0 END) AS unpriced_calls
FROM usage_ledger
WHERE owner_id = :owner AND created_at >= to_timestamp(:lo) AND created_at < to_timestamp(:hi)
  AND (CAST(:end_user AS TEXT) IS NULL OR end_user = :end_user)
GROUP BY k ORDER BY k NULLS LAST

-- name: subtree_use
-- A session and every session below it (its sub-agents, theirs, …): their summed totals.
WITH RECURSIVE tree(id) AS (
  SELECT id FROM sessions WHERE id = :sid
  UNION ALL
  SELECT s.id FROM sessions s JOIN tree t ON s.parent_id = t.id)
SELECT COALESCE(SUM(s.model_calls), 0) AS model_calls,
       COALESCE(SUM(s.tool_calls), 0) AS tool_calls,
       COALESCE(SUM(s.input_tokens), 0) AS input_tokens,
       COALESCE(SUM(s.output_tokens), 0) AS output_tokens,
       COALESCE(SUM(s.cached_input_tokens), 0) AS cached_input_tokens,
       COALESCE(SUM(s.reasoning_tokens), 0) AS reasoning_tokens,
       COALESCE(SUM(s.cost_nano_usd), 0) AS cost,
       COALESCE(SUM(s.unpriced_calls), 0) AS unpriced_calls, COUNT(*) AS sessions
FROM sessions s JOIN tree t ON t.id = s.id
