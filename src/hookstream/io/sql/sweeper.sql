-- name: sweep
-- Pending deliveries of active endpoints that should run now and have no task: parked
-- ones whose slot has come (see 0008_parked.sql), ones due before their endpoint was
-- released from a pause or a disablement (held work, sent at once), and ones overdue by
-- more than the bound (their task was lost, however). One statement marks them swept
-- (next_attempt_at = now(), no longer parked) and returns them with why, so concurrent
-- sweepers skip each other's rows; the caller then produces their tasks. A crash in
-- between leaves them due again after the bound: a delay, never a loss. Bounded per
-- endpoint and in total; the per-endpoint probe uses deliveries_due.
WITH picked AS (
    SELECT d.delivery_id, d.committed_at, d.reason
    FROM endpoints e
    CROSS JOIN LATERAL (
        SELECT x.delivery_id, x.committed_at,
               CASE WHEN x.parked THEN 'parked'
                    WHEN x.next_attempt_at < e.released_at THEN 'released'
                    ELSE 'lost' END AS reason
        FROM deliveries x
        WHERE x.endpoint_id = e.id AND x.status = 'pending'
          AND (x.next_attempt_at < now() - make_interval(secs => %(after_s)s)
               OR x.next_attempt_at < e.released_at
               OR (x.parked AND x.next_attempt_at <= now()))
        ORDER BY x.next_attempt_at
        LIMIT %(per_endpoint)s
    ) d
    WHERE e.status = 'active'
    LIMIT %(limit)s
),
locked AS (
    SELECT x.delivery_id, x.committed_at, picked.reason
    FROM deliveries x JOIN picked USING (delivery_id, committed_at)
    WHERE x.status = 'pending'
    FOR UPDATE OF x SKIP LOCKED
)
UPDATE deliveries d
SET next_attempt_at = now(), parked = false
FROM locked
WHERE d.delivery_id = locked.delivery_id AND d.committed_at = locked.committed_at
RETURNING d.delivery_id, d.event_id, d.endpoint_id, d.tenant, d.lease_version, d.attempts,
          d.committed_at, locked.reason

-- name: postpone
-- A deferred task's due time is the row's too: the sweeper then tells a delivery waiting
-- its turn (deferred, task in a delay tier) from one whose task was lost.
UPDATE deliveries d
SET next_attempt_at = to_timestamp(x.due)
FROM unnest(%(ids)b::uuid[], %(committed_at)b::timestamptz[], %(versions)b::int[],
            %(due)b::float8[]) AS x(id, committed_at, version, due)
WHERE d.delivery_id = x.id AND d.committed_at = x.committed_at AND d.lease_version = x.version
  AND d.status = 'pending'

-- name: park
-- A slow endpoint's excess backlog: the rows wait in PostgreSQL, due at their slot of the
-- endpoint's drain schedule, with no task anywhere; the sweep above releases them.
UPDATE deliveries d
SET next_attempt_at = to_timestamp(x.due), parked = true
FROM unnest(%(ids)b::uuid[], %(committed_at)b::timestamptz[], %(versions)b::int[],
            %(due)b::float8[]) AS x(id, committed_at, version, due)
WHERE d.delivery_id = x.id AND d.committed_at = x.committed_at AND d.lease_version = x.version
  AND d.status = 'pending'

-- name: pull_forward
-- An endpoint that now drains faster than when its backlog was parked: the remaining
-- slots move toward now by the ratio of the two paces (hookstream.policy.backlog
-- .compressed), so the sweeper hands them back at the new pace. One index range
-- (deliveries_due) of one endpoint.
UPDATE deliveries
SET next_attempt_at = to_timestamp(%(now)s)
                      + (next_attempt_at - to_timestamp(%(now)s)) * %(factor)s::float8
WHERE endpoint_id = %(endpoint)s AND next_attempt_at > to_timestamp(%(now)s)
  AND parked AND status = 'pending'
