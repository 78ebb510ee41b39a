-- name: sweep
-- Pending deliveries of active endpoints that should run now and have no task: parked
-- ones whose slot has come (see 0008_parked.sql), ones due before their endpoint was
-- released from a pause or a disablement (held work, sent at once), and ones overdue by
-- more than the bound (their task was lost, however). One statement marks them swept
-- (next_attempt_at = now(), no longer parked) and returns them with why, so concurrent
-- sweepers skip each other's rows; the caller then produces their tasks. A crash in
-- between leaves them due again after the bound: a delay, never a loss. Bounded per
-- endpoint and in total; the per-endpoint probe uses deliveries_due.
-- The probe reads the endpoint's pending rows in due order only up to now (each reason
-- implies it): past that lie the parked rows of a slow endpoint's drain schedule, which
-- a sweep that found fewer than per_endpoint rows read whole, every sweep (a 20 k
-- backlog read in full for nothing). Rows are locked as the probe returns them, so the
-- update joins them by primary key; a second join of the picked rows to deliveries on
-- status = 'pending' was planned as a hash join over every pending row of every day
-- (statistics older than the backlog make the status partial indexes look empty).
-- The same stale statistics let the probe read deliveries_pending_age (created_at order,
-- every pending row of the partition for each endpoint) and sort: the caller runs this
-- with enable_sort off, so only the index that gives next_attempt_at order is left.
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
          AND x.next_attempt_at <= greatest(now(), e.released_at)
          AND (x.next_attempt_at < now() - make_interval(secs => %(after_s)s)
               OR x.next_attempt_at < e.released_at
               OR (x.parked AND x.next_attempt_at <= now()))
        ORDER BY x.next_attempt_at
        LIMIT %(per_endpoint)s
        FOR UPDATE OF x SKIP LOCKED
    ) d
    WHERE e.status = 'active'
    LIMIT %(limit)s
)
UPDATE deliveries d
SET next_attempt_at = now(), parked = false
FROM picked
WHERE d.delivery_id = picked.delivery_id AND d.committed_at = picked.committed_at
  -- the picked rows' keys as an array too: a join alone was priced at a probe of every
  -- partition per row and hashed the whole table instead
  AND d.delivery_id = ANY(ARRAY(SELECT delivery_id FROM picked))
  AND d.committed_at = ANY(ARRAY(SELECT committed_at FROM picked))
RETURNING d.delivery_id, d.event_id, d.endpoint_id, d.tenant, d.lease_version, d.attempts,
          d.committed_at, picked.reason

-- name: postpone
-- A deferred task's due time is the row's too: the sweeper then tells a delivery waiting
-- its turn (deferred, task in a delay tier) from one whose task was lost.
UPDATE deliveries d
SET next_attempt_at = to_timestamp(x.due)
FROM unnest(%(ids)b::uuid[], %(committed_at)b::timestamptz[], %(versions)b::int[],
            %(due)b::float8[]) AS x(id, committed_at, version, due)
WHERE d.delivery_id = x.id AND d.committed_at = x.committed_at AND d.lease_version = x.version
  -- by primary key in the batch's days (dispatcher.sql's claim says why)
  AND d.delivery_id = ANY(%(ids)b::uuid[])
  AND d.committed_at >= hookstream_days_from(%(committed_at)b::timestamptz[])
  AND d.committed_at < hookstream_days_until(%(committed_at)b::timestamptz[])
  AND CASE d.status WHEN 'pending' THEN true ELSE false END
RETURNING d.delivery_id

-- name: park
-- A slow endpoint's excess backlog: the rows wait in PostgreSQL, due at their slot of the
-- endpoint's drain schedule, with no task anywhere; the sweep above releases them.
UPDATE deliveries d
SET next_attempt_at = to_timestamp(x.due), parked = true
FROM unnest(%(ids)b::uuid[], %(committed_at)b::timestamptz[], %(versions)b::int[],
            %(due)b::float8[]) AS x(id, committed_at, version, due)
WHERE d.delivery_id = x.id AND d.committed_at = x.committed_at AND d.lease_version = x.version
  -- by primary key in the batch's days (dispatcher.sql's claim says why)
  AND d.delivery_id = ANY(%(ids)b::uuid[])
  AND d.committed_at >= hookstream_days_from(%(committed_at)b::timestamptz[])
  AND d.committed_at < hookstream_days_until(%(committed_at)b::timestamptz[])
  AND CASE d.status WHEN 'pending' THEN true ELSE false END
RETURNING d.delivery_id

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

-- name: release_parked
-- An endpoint that answered and has nothing left to send while rows of its own wait
-- parked for later slots: the next of them, in slot order, are handed back now and
-- marked as the sweep marks them (due now, no longer parked); the caller produces their
-- tasks. A drain schedule is a plan made from what one process had observed (a fresh
-- process knows no latency, an earlier one planned at a pace the endpoint has left):
-- this makes it a ceiling, never a reason to idle (issue #47). One index range
-- (deliveries_due) of one endpoint; run with enable_sort off, as the sweep.
WITH picked AS (
    SELECT x.delivery_id, x.committed_at
    FROM deliveries x
    WHERE x.endpoint_id = %(endpoint)s AND x.status = 'pending' AND x.parked
    ORDER BY x.next_attempt_at
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
UPDATE deliveries d
SET next_attempt_at = now(), parked = false
FROM picked
WHERE d.delivery_id = picked.delivery_id AND d.committed_at = picked.committed_at
  -- as in the sweep: the picked keys as arrays too, so the update probes by primary key
  AND d.delivery_id = ANY(ARRAY(SELECT delivery_id FROM picked))
  AND d.committed_at = ANY(ARRAY(SELECT committed_at FROM picked))
RETURNING d.delivery_id, d.event_id, d.endpoint_id, d.tenant, d.lease_version, d.attempts,
          d.committed_at
