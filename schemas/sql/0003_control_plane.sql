-- Control plane (issue #6): tenants, hashed API keys and long-running operations.
-- 0002 is left to the retry/circuit work; numbers are never reused.

-- A tenant is the `tenant` text that outbox rows, endpoints and deliveries already carry.
-- Endpoints do not reference this table: producers may emit for a tenant before an
-- operator registers it, and the walking-skeleton rows predate it.
CREATE TABLE tenants (
    id          text        PRIMARY KEY CHECK (id ~ '^[a-z0-9][a-z0-9_.-]{0,62}$'),
    name        text        NOT NULL DEFAULT '',
    created_at  timestamptz NOT NULL DEFAULT now()
);

-- Only the SHA-256 of a key is stored: the token is 32 random bytes, so a fast hash is
-- enough (there is nothing to brute-force). tenant NULL means an operator key.
CREATE TABLE api_keys (
    id          uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    tenant      text        REFERENCES tenants (id) ON DELETE CASCADE,
    name        text        NOT NULL DEFAULT '',
    prefix      text        NOT NULL,
    key_sha256  bytea       NOT NULL UNIQUE,
    created_at  timestamptz NOT NULL DEFAULT now(),
    revoked_at  timestamptz
);
CREATE INDEX api_keys_tenant ON api_keys (tenant);

-- Bulk replay / recovery: answered 202 + Location, worked through in batches by
-- whichever API instance holds the lease, resumed by another one if it dies.
CREATE TABLE operations (
    id                uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    tenant            text        NOT NULL,
    kind              text        NOT NULL CHECK (kind IN ('replay', 'recover')),
    endpoint_id       uuid        NOT NULL,
    status            text        NOT NULL DEFAULT 'running'
                      CHECK (status IN ('running', 'succeeded', 'failed')),
    params            jsonb       NOT NULL,
    -- keyset position of the last batch: (created_at, delivery_id) of its last row
    cursor_at         timestamptz,
    cursor_id         uuid,
    total             integer     NOT NULL DEFAULT 0,
    processed         integer     NOT NULL DEFAULT 0,
    enqueued          integer     NOT NULL DEFAULT 0,
    error             text,
    lease_owner       text,
    lease_expires_at  timestamptz,
    created_at        timestamptz NOT NULL DEFAULT now(),
    updated_at        timestamptz NOT NULL DEFAULT now(),
    finished_at       timestamptz
);
CREATE INDEX operations_running ON operations (lease_expires_at) WHERE status = 'running';
CREATE INDEX operations_tenant ON operations (tenant, created_at);
