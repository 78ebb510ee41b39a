-- Signing secrets at rest (hookstream.ops.secret_keys, through ops/secrets_store.py).
-- The key never appears here: Python seals and opens, PostgreSQL stores bytes.

-- name: sample_per_key
-- One sealed row per key id in use: enough to prove at start-up that each key opens
-- what it sealed. endpoint_secrets holds a few rows per endpoint: a scan is cheap.
SELECT DISTINCT ON (secret_key_id) endpoint_id, secret_key_id, secret_sealed
FROM endpoint_secrets
WHERE secret_key_id IS NOT NULL
ORDER BY secret_key_id

-- name: count_plaintext
SELECT count(*) AS n FROM endpoint_secrets WHERE secret IS NOT NULL

-- name: to_reseal
-- Plaintext rows, and rows sealed with a key that is no longer the current one; locked
-- so two concurrent runs never seal the same row twice.
SELECT endpoint_id, version, secret, secret_key_id, secret_sealed
FROM endpoint_secrets
WHERE secret IS NOT NULL OR secret_key_id <> %(current)s
LIMIT %(limit)s
FOR UPDATE SKIP LOCKED

-- name: store_sealed
UPDATE endpoint_secrets
SET secret = NULL, secret_key_id = %(key_id)s, secret_sealed = %(sealed)s
WHERE endpoint_id = %(endpoint_id)s AND version = %(version)s
