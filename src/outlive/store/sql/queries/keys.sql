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
