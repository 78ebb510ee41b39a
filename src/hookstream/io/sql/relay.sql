-- name: claim_batch
-- One autocommitted statement claims the batch (see 0007_outbox_claims.sql): the rows
-- nobody holds a live claim on — never claimed, handed back, claimed by a token whose
-- advisory lock is gone (its relay died), or claimed longer ago than the lease. SKIP
-- LOCKED lets relays (and the lanes of one relay) claiming at the same moment take
-- different rows. No id cursor: a row whose transaction commits late is simply found by a
-- later round. Values come out wire-ready for the Avro encoder (id as text, times as
-- epoch microseconds) so Python builds no UUID or datetime objects.
WITH live AS (
    -- advisory locks are per database: another database's relays hold their own tokens
    SELECT l.objid::int8 AS token FROM pg_locks l
    JOIN pg_database db ON db.oid = l.database AND db.datname = current_database()
    WHERE l.locktype = 'advisory' AND l.classid = %(lock_class)s AND l.objsubid = 2
      AND l.granted
), batch AS (
    SELECT o.id FROM outbox o
    WHERE o.published_at IS NULL AND o.quarantined_at IS NULL
      AND (o.claimed_by IS NULL OR o.claimed_until < now()
           OR o.claimed_by NOT IN (SELECT token FROM live))
    ORDER BY o.id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
UPDATE outbox o
SET claimed_by = %(token)s, claimed_until = now() + make_interval(secs => %(lease_s)s)
FROM batch
WHERE o.id = batch.id
RETURNING o.id, o.event_id::text, o.tenant, o.type, o.schema_version, o.object_id,
          o.object_version, o.coalescing_key,
          (extract(epoch FROM o.occurred_at) * 1000000)::bigint AS occurred_at_us,
          (extract(epoch FROM o.created_at) * 1000000)::bigint AS committed_at_us,
          o.payload

-- name: mark_published
UPDATE outbox SET published_at = now(), claimed_by = NULL, claimed_until = NULL
WHERE id = ANY(%(ids)b::bigint[])

-- name: release
-- Rows that failed for now go back at once (the next round retries them), unless another
-- claimer already took them over.
UPDATE outbox SET claimed_by = NULL, claimed_until = NULL
WHERE id = ANY(%(ids)s::bigint[]) AND claimed_by = %(token)s AND published_at IS NULL

-- name: quarantine
UPDATE outbox AS o SET quarantined_at = now(), quarantine_reason = q.reason
FROM unnest(%(ids)s::bigint[], %(reasons)s::text[]) AS q(id, reason)
WHERE o.id = q.id

-- name: backlog
-- Refreshed every second. The backlog is a few rows normally but millions after a long
-- Kafka outage, when an exact count(*) and min(created_at) would walk every unpublished
-- row each second, so: the count stops at %(cap)s (hookstream.core.counts; %(cap)s means
-- "at least"), and the oldest age is taken over the head of outbox_pending, the first
-- %(head)s unpublished rows in id order. Ids come from a sequence at insert time while
-- created_at is the producer's transaction start, so a long producer transaction can
-- insert a row older than lower ids: the head covers that skew unless the older row sits
-- more than %(head)s rows behind the head, and the age is then a lower bound.
SELECT least((SELECT count(*) FROM (SELECT 1 FROM outbox
                                    WHERE published_at IS NULL AND quarantined_at IS NULL
                                    LIMIT %(cap)s + 1) AS capped), %(cap)s) AS rows,
       coalesce((SELECT extract(epoch FROM now() - min(h.created_at))
                 FROM (SELECT created_at FROM outbox
                       WHERE published_at IS NULL AND quarantined_at IS NULL
                       ORDER BY id LIMIT %(head)s) AS h), 0)::float8 AS oldest_age_s

-- name: purge_published
-- Retention: published rows leave in batches, oldest first, each DELETE short (a few
-- thousand rows) so it never holds long locks or one huge WAL burst. SKIP LOCKED lets
-- two relays purge at once. Quarantined rows stay: an operator has to look at them.
-- The ids travel as an array (= ANY(ARRAY(...))), not as IN (SELECT ...): with most of
-- the table past retention the planner joins an IN list of a few thousand ids against a
-- Seq Scan of the whole outbox; an array makes each id one primary-key probe.
DELETE FROM outbox
WHERE id = ANY(ARRAY(
    SELECT id FROM outbox
    WHERE published_at < now() - make_interval(secs => %(retention_s)s)
    ORDER BY published_at
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
))
