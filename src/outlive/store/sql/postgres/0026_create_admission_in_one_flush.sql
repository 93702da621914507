-- A create's admission refuses inside the statement (quotas.sql, `admit_create`), so the
-- create is sent in one flush and holds its owner's create window for no round trip of the
-- client's: a refusal is this error, SQLSTATE OL429, its DETAIL the refusal as JSON
-- (`refusal`, `limit`, `retry_after`, `owner`), which the store turns into the same error a
-- SQLite check raises (`_quotas.refused_create`).
CREATE FUNCTION outlive_refuse_create(detail jsonb) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
  RAISE EXCEPTION 'create refused: %', detail ->> 'refusal'
    USING ERRCODE = 'OL429', DETAIL = detail::text;
END
$$;
