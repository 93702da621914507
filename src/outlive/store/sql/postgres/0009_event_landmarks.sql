-- The events that date a transcript's items (a snapshot frame's `times`): every one but the
-- text deltas, read without scanning the deltas of a long answer.
CREATE INDEX session_events_landmarks ON session_events (session_id, seq)
    WHERE type NOT IN ('text_delta', 'thinking_delta');
