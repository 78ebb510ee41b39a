-- name: store_events
-- Events are stored once and never rewritten: a second copy is a no-op here and is
-- compared by hash afterwards (check_events).
INSERT INTO events (event_id, tenant, type, schema_version, object_id, object_version,
                    coalescing_key, occurred_at, committed_at, payload, payload_sha256)
SELECT * FROM unnest(%(event_id)s::uuid[], %(tenant)s::text[], %(type)s::text[],
                     %(schema_version)s::int[], %(object_id)s::text[], %(object_version)s::bigint[],
                     %(coalescing_key)s::text[], %(occurred_at)s::timestamptz[],
                     %(committed_at)s::timestamptz[], %(payload)s::bytea[], %(sha)s::bytea[])
ON CONFLICT (event_id) DO NOTHING
RETURNING event_id

-- name: stored_hashes
SELECT event_id, payload_sha256 FROM events WHERE event_id = ANY(%(ids)s)

-- name: record_conflict
INSERT INTO event_conflicts (event_id, payload_sha256) VALUES (%(event_id)s, %(sha)s)

-- name: create_deliveries
-- One row per (event, matching endpoint); the UNIQUE constraint makes a second pass
-- over the same event create nothing. Paused endpoints get rows (they wait);
-- disabled ones get nothing.
WITH ev AS (
    SELECT * FROM unnest(%(event_id)s::uuid[], %(tenant)s::text[], %(type)s::text[],
                         %(coalescing_key)s::text[], %(committed_at)s::timestamptz[])
        AS e(event_id, tenant, type, coalescing_key, committed_at)
)
INSERT INTO deliveries (event_id, endpoint_id, tenant, endpoint_config_version, expires_at,
                        coalescing_key)
SELECT ev.event_id, ep.id, ep.tenant, ep.config_version,
       ev.committed_at + make_interval(secs => %(window_s)s), ev.coalescing_key
FROM ev
JOIN endpoints ep ON ep.tenant = ev.tenant AND ep.status <> 'disabled'
WHERE EXISTS (
    SELECT 1 FROM unnest(ep.event_types) AS f(pattern)
    WHERE f.pattern = '*'
       OR f.pattern = ev.type
       OR (right(f.pattern, 2) = '.*' AND starts_with(ev.type, left(f.pattern, -1)))
)
ON CONFLICT (event_id, endpoint_id) DO NOTHING
RETURNING delivery_id, event_id, endpoint_id, tenant, lease_version

-- name: pending_deliveries_of
-- On a second pass over an event (relay duplicate, fanout restart) the tasks of rows
-- still pending are produced again: the first pass may have died before producing
-- them. A duplicate task is harmless: its lease version no longer matches once claimed.
SELECT delivery_id, event_id, endpoint_id, tenant, lease_version
FROM deliveries
WHERE event_id = ANY(%(ids)s) AND status = 'pending'
