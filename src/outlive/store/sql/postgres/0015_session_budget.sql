-- Session budgets (docs/usage.md): the caps on what the session's model calls may use, as a
-- JSON object (NULL: none; the agent's default, if any, applies). A run that reaches one
-- settles the session with attention 'budget'.
ALTER TABLE sessions ADD COLUMN budget JSONB;
