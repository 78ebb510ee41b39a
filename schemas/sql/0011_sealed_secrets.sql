-- Signing secrets sealed at rest (issue #14). A secret is AES-256-GCM ciphertext
-- (nonce || ciphertext || tag, hookstream.core.secretbox) under the key named by
-- secret_key_id, one of HOOKSTREAM_SECRET_KEYS. The key never reaches PostgreSQL: this
-- migration only makes room, and `hookstream secrets reencrypt` seals the plaintext rows
-- written before it (and re-seals rows under an older key after a key rotation), emptying
-- `secret`. Until then a row may still be plaintext, and readers accept either, so the
-- services can be upgraded before the re-encryption runs.
ALTER TABLE endpoint_secrets
    ALTER COLUMN secret DROP NOT NULL,
    ADD COLUMN secret_key_id text,
    ADD COLUMN secret_sealed bytea,
    -- exactly one form per row: plaintext (legacy) or sealed with a named key
    ADD CONSTRAINT endpoint_secrets_one_form CHECK (
        (secret IS NULL) = (secret_sealed IS NOT NULL)
        AND (secret_sealed IS NULL) = (secret_key_id IS NULL));
