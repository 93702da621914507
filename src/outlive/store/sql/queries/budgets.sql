-- Owner budgets (docs/usage.md): an owner's caps per calendar month, and the holds of the
-- model calls in flight that each admission counts beside the month's ledger.

-- name: owner_budget
SELECT monthly_budget FROM owners WHERE id = :owner

-- name: owners_with_budgets
SELECT id FROM owners WHERE monthly_budget IS NOT NULL

-- name: lock_owner_budget
-- Admissions of one owner's calls take turns on its row, so two never both see the same room.
SELECT monthly_budget FROM owners WHERE id = :owner {for_update}

-- name: set_owner_budget
UPDATE owners SET monthly_budget = :budget WHERE id = :owner

-- name: month_use
-- dialect: sqlite
-- `:lo` is the month's first instant in epoch seconds.
SELECT COUNT(*) AS model_calls, COALESCE(SUM(input_tokens), 0) AS input_tokens,
       COALESCE(SUM(output_tokens), 0) AS output_tokens,
       COALESCE(SUM(cached_input_tokens), 0) AS cached_input_tokens,
       COALESCE(SUM(reasoning_tokens), 0) AS reasoning_tokens,
       COALESCE(SUM(cost_nano_usd), 0) AS cost,
       COALESCE(SUM(CASE WHEN cost_nano_usd IS NULL THEN 1 ELSE 0 END), 0) AS unpriced_calls
FROM usage_ledger WHERE owner_id = :owner AND created_at >= :lo

-- name: month_use
-- dialect: postgres
SELECT COUNT(*) AS model_calls, COALESCE(SUM(input_tokens), 0) AS input_tokens,
       COALESCE(SUM(output_tokens), 0) AS output_tokens,
       COALESCE(SUM(cached_input_tokens), 0) AS cached_input_tokens,
       COALESCE(SUM(reasoning_tokens), 0) AS reasoning_tokens,
       COALESCE(SUM(cost_nano_usd), 0) AS cost,
       COALESCE(SUM(CASE WHEN cost_nano_usd IS NULL THEN 1 ELSE 0 END), 0) AS unpriced_calls
FROM usage_ledger WHERE owner_id = :owner AND created_at >= to_timestamp(:lo)

-- name: drop_stale_holds
-- A hold counts while its run holds the session and its call is not written yet.
DELETE FROM budget_holds
WHERE owner_id = :owner AND NOT EXISTS (
  SELECT 1 FROM sessions s
  WHERE s.id = budget_holds.session_id AND s.fence = budget_holds.fence
    AND s.model_calls = budget_holds.model_calls AND s.lease_expires_at > {now})

-- name: held_use
-- The holds of the owner's other calls in flight (the caller dropped the stale ones).
SELECT COUNT(*) AS calls, COALESCE(SUM(tokens), 0) AS tokens,
       COALESCE(SUM(cost_nano_usd), 0) AS cost
FROM budget_holds WHERE owner_id = :owner AND session_id <> :sid

-- name: put_hold
INSERT INTO budget_holds (session_id, owner_id, fence, model_calls, tokens, cost_nano_usd,
                          created_at)
SELECT s.id, s.owner_id, s.fence, s.model_calls, CAST(:tokens AS bigint),
       CAST(:cost AS bigint), {now}
FROM sessions s WHERE s.id = :sid
ON CONFLICT (session_id) DO UPDATE SET
  owner_id = excluded.owner_id, fence = excluded.fence, model_calls = excluded.model_calls,
  tokens = excluded.tokens, cost_nano_usd = excluded.cost_nano_usd,
  created_at = excluded.created_at

-- name: budget_stopped
-- The owner's sessions a budget stopped, which a higher owner budget may let go on.
SELECT id FROM sessions
WHERE owner_id = :owner AND status = 'succeeded' AND attention = 'budget'
  AND deleted_at IS NULL
ORDER BY id

-- name: tree_root_budget
-- A sub-agent tree's budget is its root's: its own, else its agent's default (the caller's).
SELECT budget, agent FROM sessions WHERE id = :root

-- name: lock_tree_root
-- Admissions of one tree's calls take turns on its root's row (locked after the calling
-- session's, the order a child's end takes, child then parent).
SELECT budget, agent FROM sessions WHERE id = :root {for_update}

-- name: tree_use
-- What the tree's sessions used: the sum of their running totals (the ledger's, per row).
SELECT COALESCE(SUM(model_calls), 0) AS model_calls, COALESCE(SUM(tool_calls), 0) AS tool_calls,
       COALESCE(SUM(input_tokens), 0) AS input_tokens,
       COALESCE(SUM(output_tokens), 0) AS output_tokens,
       COALESCE(SUM(cached_input_tokens), 0) AS cached_input_tokens,
       COALESCE(SUM(reasoning_tokens), 0) AS reasoning_tokens,
       COALESCE(SUM(cost_nano_usd), 0) AS cost,
       COALESCE(SUM(unpriced_calls), 0) AS unpriced_calls, COUNT(*) AS sessions
FROM sessions WHERE root_id = :root OR id = :root

-- name: tree_held_use
-- The live holds of the tree's other calls in flight (same rule as `drop_stale_holds`).
SELECT COUNT(*) AS calls, COALESCE(SUM(h.tokens), 0) AS tokens,
       COALESCE(SUM(h.cost_nano_usd), 0) AS cost
FROM budget_holds h JOIN sessions s ON s.id = h.session_id
WHERE (s.root_id = :root OR s.id = :root) AND h.session_id <> :sid
  AND s.fence = h.fence AND s.model_calls = h.model_calls AND s.lease_expires_at > {now}
