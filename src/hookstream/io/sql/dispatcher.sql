-- name: claim
-- Array parameters go in binary (the b placeholders): text-format array dumping was 5
-- percent of the dispatcher's profile.
-- A task claims its delivery only if the lease version it carries is the row's
-- current one and nobody holds a live lease: duplicate or stale tasks claim nothing.
-- The attempt row is written now, before the POST, so every request a receiver ever
-- sees has an attempt row (an attempt cut short by a crash is closed by reap, or by
-- the claim that takes its expired lease over: see abandoned).
-- Every row is found by (delivery_id, committed_at), the task's event commit time being
-- the partition key (0014): run-time pruning probes one partition per task, not all. A
-- task whose committed_at is wrong claims nothing and is dropped as stale; its row,
-- still pending, is the sweeper's (it re-queues it with the row's own key).
WITH task AS (
    SELECT * FROM unnest(%(delivery_id)b::uuid[], %(committed_at)b::timestamptz[],
                         %(lease_version)b::int[], %(manual)b::bool[])
        AS t(delivery_id, committed_at, lease_version, manual)
),
claimed AS (
    UPDATE deliveries d
    SET status = 'in_flight',
        parked = false,  -- claimed through another task before its slot: not parked now
        lease_version = d.lease_version + 1,
        attempts = d.attempts + 1,
        lease_expires_at = now() + make_interval(secs => %(lease_s)s),
        updated_at = now()
    FROM task
    WHERE d.delivery_id = task.delivery_id AND d.committed_at = task.committed_at
      -- The batch once more, as plain restrictions on d: its ids, and its days as a
      -- range, so the planner prunes to those days at plan time (a join to task alone
      -- plans every partition) and reads the rows by primary key, 100 probes for 100
      -- tasks. Without them it joined task to every pending row of the day by hash (the
      -- status partial indexes look nearly empty to statistics older than the day's
      -- backlog): each claim read the whole backlog, 40,400 rows for a claim of 100 in
      -- the history benchmark. A range, not committed_at = ANY(the times): the planner
      -- multiplies that by the ids' selectivity and expects one row (0017 says what
      -- that cost).
      AND d.delivery_id = ANY(%(delivery_id)b::uuid[])
      AND d.committed_at >= hookstream_days_from(%(committed_at)b::timestamptz[])
      AND d.committed_at < hookstream_days_until(%(committed_at)b::timestamptz[])
      AND d.lease_version = task.lease_version
      -- CASE, not OR: a condition the planner cannot prove implies the partial indexes'
      -- status predicates, so no plan can read a status index whose estimate is stale.
      AND CASE d.status WHEN 'pending' THEN true
                        WHEN 'in_flight' THEN d.lease_expires_at < now()
                        ELSE false END
      -- A deleted endpoint is never called again, even by a dispatcher whose cached
      -- endpoint state still says active (its refresh comes later): one primary-key
      -- probe of the small endpoints table per claimed row. The task then claims nothing
      -- and is dropped as stale; its row goes with the endpoint's delete operation. The
      -- row must exist too: with no foreign key (0014), a fanout statement that began
      -- before the deletion can commit a row after the operation removed the endpoint;
      -- such a row is never claimed (and holds no day of history: ops/retention.py).
      AND EXISTS (SELECT 1 FROM endpoints live
                  WHERE live.id = d.endpoint_id AND live.status <> 'deleted')
    RETURNING d.delivery_id, d.event_id, d.endpoint_id, d.lease_version, d.attempts,
              d.expires_at, task.manual, d.committed_at
),
started AS (
    INSERT INTO attempts (delivery_id, attempt_no, started_at, outcome, manual, committed_at)
    SELECT delivery_id, attempts, now(), 'in_flight', manual, committed_at FROM claimed
),
-- A claim of an expired lease (the reaper's task can arrive before the reaper releases
-- the row) closes the dead worker's attempt here, as release_expired would have: no
-- attempt is left in flight behind a newer one. A claim of a pending row matches
-- nothing (its previous attempt has its outcome).
abandoned AS (
    UPDATE attempts a
    SET outcome = 'lost', error_class = 'worker_lost', finished_at = now()
    FROM claimed c
    WHERE a.delivery_id = c.delivery_id AND a.attempt_no = c.attempts - 1
      AND a.committed_at = c.committed_at AND a.outcome = 'in_flight'
      -- in the batch's days; no ids array here: a probe by the claimed row's key would
      -- walk all of the array's ids per probe (7.8 ms of a 200-task claim)
      AND a.committed_at >= hookstream_days_from(%(committed_at)b::timestamptz[])
      AND a.committed_at < hookstream_days_until(%(committed_at)b::timestamptz[])
)
SELECT c.delivery_id, c.lease_version, c.attempts AS attempt_no, c.endpoint_id, c.event_id,
       c.manual, extract(epoch FROM c.expires_at)::float8 AS expires_at_s, c.committed_at,
       ev.payload, ep.url, ep.tenant,
       sec.versions, sec.key_ids, sec.blobs
FROM claimed c
JOIN events ev ON ev.event_id = c.event_id AND ev.committed_at = c.committed_at
    AND ev.committed_at >= hookstream_days_from(%(committed_at)b::timestamptz[])
    AND ev.committed_at < hookstream_days_until(%(committed_at)b::timestamptz[])
JOIN endpoints ep ON ep.id = c.endpoint_id
-- Sealed secrets (key id, bytes), opened in Python once per version
-- (hookstream.dispatcher.store): one walk of the primary key, three aggregates. A row
-- written before migration 0011 and not yet re-encrypted has no key id and carries its
-- plaintext as bytes.
CROSS JOIN LATERAL (
    SELECT array_agg(s.version ORDER BY s.version DESC) AS versions,
           array_agg(s.secret_key_id ORDER BY s.version DESC) AS key_ids,
           array_agg(coalesce(s.secret_sealed, convert_to(s.secret, 'UTF8'))
                     ORDER BY s.version DESC) AS blobs
    FROM endpoint_secrets s
    WHERE s.endpoint_id = ep.id AND (s.expires_at IS NULL OR s.expires_at > now())
) sec

-- name: claim_first
-- claim for a batch whose tasks all carry lease version 0 (first attempts; the common
-- case): the same statement without abandoned. A row is claimed only with the lease
-- version its task carries, only claims move it (each by one, with attempts), and only
-- claims write attempt rows, so a row still at version 0 was never claimed: it has no
-- attempt to close, and abandoned would match nothing. Leaving it out makes every first
-- attempt's claim cheaper: 0.89 ms of planning and 0.86 of execution per call against
-- 1.08 and 0.95 at 1,000 deliveries/s (benchmarks/pipeline.py --pg-statements; BENCHMARKS.md, Pipeline).
-- Comments on the statement's parts are claim's; test_queries checks that the two
-- statements differ by abandoned only.
WITH task AS (
    SELECT * FROM unnest(%(delivery_id)b::uuid[], %(committed_at)b::timestamptz[],
                         %(lease_version)b::int[], %(manual)b::bool[])
        AS t(delivery_id, committed_at, lease_version, manual)
),
claimed AS (
    UPDATE deliveries d
    SET status = 'in_flight',
        parked = false,
        lease_version = d.lease_version + 1,
        attempts = d.attempts + 1,
        lease_expires_at = now() + make_interval(secs => %(lease_s)s),
        updated_at = now()
    FROM task
    WHERE d.delivery_id = task.delivery_id AND d.committed_at = task.committed_at
      AND d.delivery_id = ANY(%(delivery_id)b::uuid[])
      AND d.committed_at >= hookstream_days_from(%(committed_at)b::timestamptz[])
      AND d.committed_at < hookstream_days_until(%(committed_at)b::timestamptz[])
      AND d.lease_version = task.lease_version
      AND CASE d.status WHEN 'pending' THEN true
                        WHEN 'in_flight' THEN d.lease_expires_at < now()
                        ELSE false END
      AND EXISTS (SELECT 1 FROM endpoints live
                  WHERE live.id = d.endpoint_id AND live.status <> 'deleted')
    RETURNING d.delivery_id, d.event_id, d.endpoint_id, d.lease_version, d.attempts,
              d.expires_at, task.manual, d.committed_at
),
started AS (
    INSERT INTO attempts (delivery_id, attempt_no, started_at, outcome, manual, committed_at)
    SELECT delivery_id, attempts, now(), 'in_flight', manual, committed_at FROM claimed
)
SELECT c.delivery_id, c.lease_version, c.attempts AS attempt_no, c.endpoint_id, c.event_id,
       c.manual, extract(epoch FROM c.expires_at)::float8 AS expires_at_s, c.committed_at,
       ev.payload, ep.url, ep.tenant,
       sec.versions, sec.key_ids, sec.blobs
FROM claimed c
JOIN events ev ON ev.event_id = c.event_id AND ev.committed_at = c.committed_at
    AND ev.committed_at >= hookstream_days_from(%(committed_at)b::timestamptz[])
    AND ev.committed_at < hookstream_days_until(%(committed_at)b::timestamptz[])
JOIN endpoints ep ON ep.id = c.endpoint_id
CROSS JOIN LATERAL (
    SELECT array_agg(s.version ORDER BY s.version DESC) AS versions,
           array_agg(s.secret_key_id ORDER BY s.version DESC) AS key_ids,
           array_agg(coalesce(s.secret_sealed, convert_to(s.secret, 'UTF8'))
                     ORDER BY s.version DESC) AS blobs
    FROM endpoint_secrets s
    WHERE s.endpoint_id = ep.id AND (s.expires_at IS NULL OR s.expires_at > now())
) sec

-- name: record_outcomes
-- Times come as epoch seconds (float8): binary floats are cheaper to send than
-- timestamptz values built as Python datetimes, one per attempt.
-- The attempt row is always completed (the request happened). The delivery row moves if
-- this worker still holds the lease, or if the reaper handed it back (pending, same lease
-- version: nobody claimed it since), or if this attempt delivered it while another
-- attempt was started (a success is never lost to a takeover). Anything else is a late
-- outcome: the caller counts the ids not returned.
WITH o AS (
    SELECT * FROM unnest(
        %(delivery_id)b::uuid[], %(lease_version)b::int[], %(attempt_no)b::int[],
        %(status)b::text[], %(started_at)b::float8[], %(finished_at)b::float8[],
        %(status_code)b::int[], %(latency_ms)b::float8[], %(error_class)b::text[],
        %(outcome)b::text[], %(excerpt)b::text[], %(error)b::text[], %(next_at)b::float8[],
        %(committed_at)b::timestamptz[])
    AS o(delivery_id, lease_version, attempt_no, status, started_at, finished_at, status_code,
         latency_ms, error_class, outcome, excerpt, error, next_at, committed_at)
),
att AS (
    UPDATE attempts a
    SET started_at = to_timestamp(o.started_at), finished_at = to_timestamp(o.finished_at),
        status_code = o.status_code,
        latency_ms = o.latency_ms, error_class = o.error_class, outcome = o.outcome,
        response_excerpt = o.excerpt
    FROM o
    WHERE a.delivery_id = o.delivery_id AND a.attempt_no = o.attempt_no
      AND a.committed_at = o.committed_at
      -- by primary key in the batch's days, as deliveries below: without the ids a plan
      -- made from a young day's statistics read the day's attempts whole per call
      AND a.delivery_id = ANY(%(delivery_id)b::uuid[])
      AND a.committed_at >= hookstream_days_from(%(committed_at)b::timestamptz[])
      AND a.committed_at < hookstream_days_until(%(committed_at)b::timestamptz[])
)
UPDATE deliveries d
SET status = o.status,
    last_error = o.error,
    lease_expires_at = NULL,
    updated_at = now(),
    next_attempt_at = coalesce(to_timestamp(o.next_at), d.next_attempt_at),
    delivered_at = CASE WHEN o.status = 'delivered' THEN to_timestamp(o.finished_at)
                        ELSE d.delivered_at END
FROM o
WHERE d.delivery_id = o.delivery_id AND d.committed_at = o.committed_at
  -- By primary key in the batch's days, as in claim (which says why): not a hash join
  -- over every in-flight row, and a status test no partial index can answer.
  AND d.delivery_id = ANY(%(delivery_id)b::uuid[])
  AND d.committed_at >= hookstream_days_from(%(committed_at)b::timestamptz[])
  AND d.committed_at < hookstream_days_until(%(committed_at)b::timestamptz[])
  AND CASE d.status WHEN 'in_flight' THEN true WHEN 'pending' THEN true ELSE false END
  AND (d.lease_version = o.lease_version OR o.status = 'delivered')
RETURNING d.delivery_id

-- name: disable_endpoints
-- The tenant learns through the same pipeline: an endpoint.disabled event in the outbox,
-- in the same transaction. Pending deliveries stay pending, for replay after re-enabling.
WITH d AS (
    UPDATE endpoints e
    SET status = 'disabled', disabled_reason = x.reason, config_version = e.config_version + 1,
        updated_at = now()
    FROM unnest(%(ids)s::uuid[], %(reasons)s::text[]) AS x(id, reason)
    WHERE e.id = x.id AND e.status <> 'disabled' AND e.status <> 'deleted'
    RETURNING e.id, e.tenant, e.url, e.disabled_reason, e.first_failure_at
)
INSERT INTO outbox (event_id, tenant, type, object_id, payload)
SELECT gen_random_uuid(), d.tenant, 'endpoint.disabled', d.id::text,
       convert_to(json_build_object('endpoint_id', d.id, 'url', d.url,
                                    'reason', d.disabled_reason,
                                    'failing_since', d.first_failure_at)::text, 'UTF8')
FROM d

-- name: update_circuits
UPDATE endpoints e
SET consecutive_failures = u.failures,
    first_failure_at = to_timestamp(u.first_failure_at),
    paused_until = to_timestamp(u.paused_until),
    updated_at = now()
FROM unnest(%(ids)b::uuid[], %(failures)b::int[], %(first_failure_at)b::float8[],
            %(paused_until)b::float8[]) AS u(id, failures, first_failure_at, paused_until)
WHERE e.id = u.id

-- name: load_endpoints
SELECT id, tenant, status, rate_per_s, burst, max_in_flight, config_version,
       consecutive_failures,
       extract(epoch FROM first_failure_at)::float8 AS first_failure_at,
       extract(epoch FROM paused_until)::float8 AS paused_until
FROM endpoints
WHERE id = ANY(%(ids)s)

-- name: expired_leases
-- Deliveries whose worker died mid-attempt. No lock is taken: the caller produces a
-- task for each (waiting for the broker, so never inside a transaction) and only then
-- releases the rows whose lease is still the one it saw; a crash in between leaves the
-- lease expired and found again, and a concurrent reaper's duplicate task is harmless.
SELECT delivery_id, event_id, endpoint_id, tenant, lease_version, attempts, committed_at
FROM deliveries
WHERE status = 'in_flight' AND lease_expires_at < now()
ORDER BY lease_expires_at
LIMIT %(limit)s

-- name: release_expired
-- Only a lease that is still the expired one seen by expired_leases: a delivery claimed
-- again meanwhile (new lease version) is left to its new worker.
WITH r AS (
    UPDATE deliveries d
    SET status = 'pending', lease_expires_at = NULL, updated_at = now(),
        next_attempt_at = now(), last_error = 'worker lost during attempt'
    FROM unnest(%(ids)s::uuid[], %(committed_at)s::timestamptz[], %(versions)s::int[])
        AS x(id, committed_at, version)
    WHERE d.delivery_id = x.id AND d.committed_at = x.committed_at
      -- by primary key in the batch's days, as in claim (which says why)
      AND d.delivery_id = ANY(%(ids)s::uuid[])
      AND d.committed_at >= hookstream_days_from(%(committed_at)s::timestamptz[])
      AND d.committed_at < hookstream_days_until(%(committed_at)s::timestamptz[])
      AND d.lease_version = x.version
      AND CASE d.status WHEN 'in_flight' THEN d.lease_expires_at < now() ELSE false END
    RETURNING d.delivery_id, d.attempts, d.committed_at
)
UPDATE attempts a
SET outcome = 'lost', error_class = 'worker_lost', finished_at = now()
FROM r
WHERE a.delivery_id = r.delivery_id AND a.attempt_no = r.attempts
  AND a.committed_at = r.committed_at AND a.outcome = 'in_flight'
  AND a.committed_at >= hookstream_days_from(%(committed_at)s::timestamptz[])
  AND a.committed_at < hookstream_days_until(%(committed_at)s::timestamptz[])

-- name: early
-- Tasks that met their row before the attempt they follow was recorded: the row is still
-- in flight at the lease version the task carries. Only a claim moves that version, so
-- such a task was made *after* the claim — a retry published before its outcome row is
-- written (outcomes.py), a reaped lease's task produced before the row is released — and
-- is early, not stale: it must come back once the row is written, never be dropped (its
-- row would then wait, pending with no task, for the sweeper's bound).
SELECT d.delivery_id
FROM deliveries d
JOIN unnest(%(ids)b::uuid[], %(committed_at)b::timestamptz[], %(versions)b::int[])
    AS x(id, committed_at, version)
    ON d.delivery_id = x.id AND d.committed_at = x.committed_at
WHERE d.delivery_id = ANY(%(ids)b::uuid[])
  -- by primary key in the batch's days (claim says why)
  AND d.committed_at >= hookstream_days_from(%(committed_at)b::timestamptz[])
  AND d.committed_at < hookstream_days_until(%(committed_at)b::timestamptz[])
  AND d.lease_version = x.version
  AND CASE d.status WHEN 'in_flight' THEN true ELSE false END
