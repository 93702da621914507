-- Owners and API keys (only a key's hash is stored).

-- name: insert_owner
INSERT INTO owners (id, name, created_at) VALUES (:id, :name, {now})
ON CONFLICT (name) DO NOTHING

-- name: owner_by_name
SELECT id, name FROM owners WHERE name = :name

-- name: insert_api_key
INSERT INTO api_keys (id, owner_id, key_hash, label, created_at)
VALUES (:id, :owner, :hash, :label, {now})

-- name: owner_for_key
SELECT o.id, o.name FROM api_keys k JOIN owners o ON o.id = k.owner_id
WHERE k.key_hash = :hash AND k.revoked_at IS NULL

-- name: list_api_keys
SELECT k.id, k.owner_id, o.name AS owner_name, k.label, k.created_at, k.revoked_at
FROM api_keys k JOIN owners o ON o.id = k.owner_id ORDER BY k.id

-- name: revoke_api_key
UPDATE api_keys SET revoked_at = {now} WHERE id = :id AND revoked_at IS NULL RETURNING id

-- name: revoke_key_logins
UPDATE login_sessions SET revoked_at = {now} WHERE key_id = :id AND revoked_at IS NULL

-- Web page logins: the cookie holds a random token; only its hash is stored.

-- name: active_key
SELECT k.id, o.id AS owner_id, o.name FROM api_keys k JOIN owners o ON o.id = k.owner_id
WHERE k.key_hash = :hash AND k.revoked_at IS NULL

-- name: purge_logins
DELETE FROM login_sessions
WHERE revoked_at IS NOT NULL OR created_at + {secs(:max_age)} < {now}

-- name: insert_login
INSERT INTO login_sessions (id, token_hash, key_id, owner_id, created_at, last_seen_at)
VALUES (:id, :token, :key, :owner, {now}, {now})

-- name: touch_login
UPDATE login_sessions SET last_seen_at = {now}
WHERE token_hash = :token AND revoked_at IS NULL
  AND last_seen_at + {secs(:idle)} > {now} AND created_at + {secs(:max_age)} > {now}
  AND key_id IN (SELECT id FROM api_keys WHERE revoked_at IS NULL)
RETURNING owner_id

-- name: owner_by_id
SELECT id, name FROM owners WHERE id = :id

-- name: end_login
UPDATE login_sessions SET revoked_at = {now} WHERE token_hash = :token AND revoked_at IS NULL
RETURNING id

-- name: list_owners
SELECT id, name, retain_seconds FROM owners ORDER BY name

-- name: set_owner_retention
UPDATE owners SET retain_seconds = :secs WHERE name = :name
RETURNING id, name, retain_seconds

-- name: owner_for_key_id
-- A browser token names the key that minted it (docs/end-users.md): live while the key is.
SELECT o.id, o.name FROM api_keys k JOIN owners o ON o.id = k.owner_id
WHERE k.id = :id AND k.revoked_at IS NULL
