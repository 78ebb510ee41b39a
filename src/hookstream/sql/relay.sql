-- name: lock_batch
-- SKIP LOCKED lets several relays (and the lanes of one relay) share the outbox: each
-- takes rows nobody else holds. No id cursor: a row whose transaction commits late is
-- simply found by a later round. Values come out wire-ready for the Avro encoder (id
-- as text, times as epoch microseconds) so Python builds no UUID or datetime objects.
SELECT id, event_id::text, tenant, type, schema_version, object_id, object_version,
       coalescing_key,
       (extract(epoch FROM occurred_at) * 1000000)::bigint AS occurred_at_us,
       (extract(epoch FROM created_at) * 1000000)::bigint AS committed_at_us,
       payload
FROM outbox
WHERE published_at IS NULL AND quarantined_at IS NULL
ORDER BY id
LIMIT %(limit)s
FOR UPDATE SKIP LOCKED

-- name: mark_published
UPDATE outbox SET published_at = now() WHERE id = ANY(%(ids)b::bigint[])

-- name: quarantine
UPDATE outbox AS o SET quarantined_at = now(), quarantine_reason = q.reason
FROM unnest(%(ids)s::bigint[], %(reasons)s::text[]) AS q(id, reason)
WHERE o.id = q.id

-- name: backlog
SELECT count(*) AS rows,
       coalesce(extract(epoch FROM now() - min(created_at)), 0)::float8 AS oldest_age_s
FROM outbox
WHERE published_at IS NULL AND quarantined_at IS NULL

-- name: purge_published
-- Retention: published rows leave in batches, oldest first, each DELETE short (a few
-- thousand rows) so it never holds long locks or one huge WAL burst. SKIP LOCKED lets
-- two relays purge at once. Quarantined rows stay: an operator has to look at them.
DELETE FROM outbox
WHERE id IN (
    SELECT id FROM outbox
    WHERE published_at < now() - make_interval(secs => %(retention_s)s)
    ORDER BY published_at
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
