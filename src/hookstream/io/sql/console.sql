-- The browser console's own queries (hookstream.controlplane.console_store). Everything
-- a tenant page shows goes through api.sql's queries (hookstream.controlplane.store);
-- these are the console's signing key, the session check and the operator's fleet lists.

-- name: console_key
SELECT key FROM console_keys WHERE id = 1

-- name: create_console_key
-- Two instances racing: the first insert wins, both then read the winner's key.
INSERT INTO console_keys (id, key) VALUES (1, %(key)s)
ON CONFLICT (id) DO NOTHING

-- name: api_key_active
-- A console session lasts only while the API key behind it (the tenant's key it signed
-- in with, or the operator key that made its portal link) is not revoked.
SELECT tenant FROM api_keys WHERE id = %(id)s AND revoked_at IS NULL

-- name: dead_letters
-- Newest first (by when they died), keyset-paginated on deliveries_dead. The page first,
-- then each of its rows' event by its full key (see api.sql list_deliveries for why).
WITH page AS MATERIALIZED (
    SELECT d.delivery_id, d.event_id, d.endpoint_id, d.tenant, d.attempts, d.last_error,
           d.created_at, d.updated_at, d.committed_at, ep.url AS endpoint_url
    FROM deliveries d
    JOIN endpoints ep ON ep.id = d.endpoint_id AND ep.status <> 'deleted'
    WHERE d.status = 'dead'
      AND (d.updated_at, d.delivery_id) < (%(before_at)s::timestamptz, %(before_id)s::uuid)
    ORDER BY d.updated_at DESC, d.delivery_id DESC
    LIMIT %(limit)s
)
SELECT p.delivery_id, p.event_id, p.endpoint_id, p.tenant, p.attempts, p.last_error,
       p.created_at, p.updated_at, ev.type AS event_type, p.endpoint_url
FROM page p
CROSS JOIN LATERAL (SELECT e.type FROM events e
                    WHERE e.event_id = p.event_id AND e.committed_at = p.committed_at) ev
ORDER BY p.updated_at DESC, p.delivery_id DESC

-- name: quarantined_outbox
-- Newest first, keyset-paginated on outbox_quarantined_by_id; the payload is cut to an
-- excerpt (a quarantined row may be the one that was too large).
SELECT id, event_id, tenant, type, schema_version, created_at, quarantined_at,
       quarantine_reason, length(payload) AS payload_bytes,
       substring(payload FROM 1 FOR 300) AS payload_head
FROM outbox
WHERE quarantined_at IS NOT NULL
  AND (quarantined_at, id) < (%(before_at)s::timestamptz, %(before_id)s::bigint)
ORDER BY quarantined_at DESC, id DESC
LIMIT %(limit)s

-- name: running_operations
-- Bulk replays and recoveries in progress (the operations_running partial index).
SELECT o.*, ep.url AS endpoint_url
FROM operations o
LEFT JOIN endpoints ep ON ep.id = o.endpoint_id
WHERE o.status = 'running'
ORDER BY o.created_at
LIMIT %(limit)s

-- name: endpoint_operations
-- An endpoint's latest bulk operations, newest first (operations_tenant: the tenant's
-- operations backwards in time, filtered to the endpoint).
SELECT * FROM operations
WHERE tenant = %(tenant)s AND endpoint_id = %(endpoint_id)s
ORDER BY created_at DESC
LIMIT %(limit)s
