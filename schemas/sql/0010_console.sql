-- The browser console (issue #17). 0009 is left to the CLI work; numbers are never reused.

-- The key that signs portal links, console session cookies and CSRF tokens. One row,
-- made by the first API instance that needs it, so every instance behind a load balancer
-- signs and verifies with the same key without a setting to distribute. Deleting the
-- row ends every console session and portal link at once (a new key is made on next use).
-- It sits beside the endpoints' signing secrets: reading this database already means
-- reading those.
CREATE TABLE console_keys (
    id          smallint    PRIMARY KEY CHECK (id = 1),
    key         bytea       NOT NULL CHECK (length(key) >= 32),
    created_at  timestamptz NOT NULL DEFAULT now()
);

-- The operator console's lists, newest first, each a walk of a small partial index
-- (dead letters and quarantined rows are few) instead of a scan of the big tables.
CREATE INDEX deliveries_dead ON deliveries (updated_at, delivery_id) WHERE status = 'dead';
-- (0009's outbox_quarantined serves the API's listing, paged by event id; the console pages
-- by the row id. Both are partial indexes over the few quarantined rows.)
CREATE INDEX outbox_quarantined_by_id ON outbox (quarantined_at, id)
    WHERE quarantined_at IS NOT NULL;
