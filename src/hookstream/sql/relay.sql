-- name: lock_batch
-- SKIP LOCKED lets several relays share the outbox: each takes rows nobody else
-- holds. No id cursor: a row whose transaction commits late is simply found later.
SELECT id, event_id, tenant, type, schema_version, object_id, object_version,
       coalescing_key, occurred_at, created_at, payload
FROM outbox
WHERE published_at IS NULL AND quarantined_at IS NULL
ORDER BY id
LIMIT %(limit)s
FOR UPDATE SKIP LOCKED

-- name: mark_published
UPDATE outbox SET published_at = now() WHERE id = ANY(%(ids)s)

-- name: quarantine
UPDATE outbox AS o SET quarantined_at = now(), quarantine_reason = q.reason
FROM unnest(%(ids)s::bigint[], %(reasons)s::text[]) AS q(id, reason)
WHERE o.id = q.id

-- name: backlog
SELECT count(*) AS rows,
       coalesce(extract(epoch FROM now() - min(created_at)), 0) AS oldest_age_s
FROM outbox
WHERE published_at IS NULL AND quarantined_at IS NULL
