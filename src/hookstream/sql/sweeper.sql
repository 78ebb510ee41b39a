-- name: sweep
-- Pending deliveries of active endpoints that should have run by now and did not: overdue
-- by more than the bound (their task was lost, however), or due before their endpoint was
-- released from a pause or a disablement (held work, sent at once). One statement marks
-- them swept (next_attempt_at = now()) and returns them, so concurrent sweepers skip each
-- other's rows; the caller then produces their tasks. A crash in between leaves them due
-- again after the bound: a delay, never a loss. Bounded per endpoint and in total; the
-- per-endpoint probe uses deliveries_due.
WITH picked AS (
    SELECT d.delivery_id
    FROM endpoints e
    CROSS JOIN LATERAL (
        SELECT x.delivery_id FROM deliveries x
        WHERE x.endpoint_id = e.id AND x.status = 'pending'
          AND (x.next_attempt_at < now() - make_interval(secs => %(after_s)s)
               OR x.next_attempt_at < e.released_at)
        ORDER BY x.next_attempt_at
        LIMIT %(per_endpoint)s
    ) d
    WHERE e.status = 'active'
    LIMIT %(limit)s
),
locked AS (
    SELECT x.delivery_id FROM deliveries x JOIN picked USING (delivery_id)
    WHERE x.status = 'pending'
    FOR UPDATE OF x SKIP LOCKED
)
UPDATE deliveries d
SET next_attempt_at = now()
FROM locked
WHERE d.delivery_id = locked.delivery_id
RETURNING d.delivery_id, d.event_id, d.endpoint_id, d.tenant, d.lease_version, d.attempts,
          extract(epoch FROM d.created_at)::float8 AS created_at_s

-- name: postpone
-- A deferred task's due time is the row's too: the sweeper then tells a delivery waiting
-- its turn (deferred, task in a delay tier) from one whose task was lost.
UPDATE deliveries d
SET next_attempt_at = to_timestamp(x.due)
FROM unnest(%(ids)b::uuid[], %(versions)b::int[], %(due)b::float8[]) AS x(id, version, due)
WHERE d.delivery_id = x.id AND d.lease_version = x.version AND d.status = 'pending'
