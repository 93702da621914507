-- Context compaction: how full the model's context was at the last model call (its input
-- tokens, or the run's estimate, and the model's window then; NULL: not known yet), written by
-- the run's fenced commit, and when the owner asked for the history to be compacted (NULL: not
-- asked, or done: the run's commit that compacts clears it).
ALTER TABLE sessions ADD COLUMN context_tokens INTEGER;
ALTER TABLE sessions ADD COLUMN context_window INTEGER;
ALTER TABLE sessions ADD COLUMN compact_requested_at TIMESTAMPTZ;
