-- What the model must do with its tools on the first call of the session's next runs
-- (docs/client-tools.md#tool-choice): {"mode": "required" | "none" | "tool", "name": tool or
-- null}; NULL: the model decides ("auto"). Set by a create or a message.
ALTER TABLE sessions ADD COLUMN tool_choice JSONB;
