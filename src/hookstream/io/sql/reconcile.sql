-- Reconciliation (hookstream reconcile; run by ops/reconcile_store.py): outbox ↔ events ↔
-- deliveries ↔ attempts over a window of publication time. Every query is read-only and
-- runs in one REPEATABLE READ snapshot, so a row moving between two checks cannot look
-- like a gap.
--
-- The window is driven by outbox.published_at (partial index outbox_published_at) and
-- then follows primary keys and unique indexes only: events (event_id, committed_at),
-- endpoints by tenant (endpoints_tenant), deliveries UNIQUE (event_id, endpoint_id,
-- committed_at), attempts (delivery_id, attempt_no, committed_at). committed_at is the
-- outbox row's created_at (the relay publishes it as the event's commit time), so every
-- join names its partition (0014). Cost grows with the rows published in the window, never
-- with the size of the tables. Unpublished rows are found through the partial index
-- outbox_pending, which only holds the unpublished head.
--
-- Parameters: since, cutoff (= min(until, now() - grace), computed by the caller),
-- stall_s (a pending row overdue longer than this, on an endpoint doing nothing, is
-- stalled), sample (rows returned per gap kind; `total` carries the full count).
-- Gap queries return (kind, key, detail, total).

-- name: db_now
-- The server's clock, first in the snapshot: the grace period is measured against it.
SELECT now()

-- name: window_counts
WITH w AS (
    SELECT o.event_id, o.created_at AS committed_at FROM outbox o
    WHERE o.published_at >= %(since)s AND o.published_at < %(cutoff)s
)
SELECT
    (SELECT count(*) FROM w) AS published,
    (SELECT count(*) FROM w JOIN deliveries d ON d.event_id = w.event_id
                                             AND d.committed_at = w.committed_at) AS deliveries,
    (SELECT count(*) FROM w JOIN deliveries d ON d.event_id = w.event_id
                                             AND d.committed_at = w.committed_at
                            JOIN attempts a ON a.delivery_id = d.delivery_id
                                           AND a.committed_at = d.committed_at) AS attempts,
    (SELECT count(*) FROM outbox q
     WHERE q.quarantined_at >= %(since)s AND q.quarantined_at < %(cutoff)s
       AND q.published_at IS NULL) AS quarantined

-- name: gaps_unpublished
-- Committed but never published (nor quarantined with a reason) past the grace period.
SELECT kind, key, detail, total FROM (
    SELECT 'unpublished_outbox' AS kind, o.event_id::text AS key,
           'committed ' || o.created_at::text || ', outbox id ' || o.id AS detail,
           count(*) OVER () AS total, row_number() OVER (ORDER BY o.id) AS rn
    FROM outbox o
    WHERE o.published_at IS NULL AND o.quarantined_at IS NULL
      AND o.created_at >= %(since)s AND o.created_at < %(cutoff)s
) g WHERE rn <= %(sample)s

-- name: gaps_not_stored
-- Published (acknowledged by Kafka) but the fanout never stored the event.
SELECT kind, key, detail, total FROM (
    SELECT 'published_not_stored' AS kind, o.event_id::text AS key,
           'published ' || o.published_at::text AS detail,
           count(*) OVER () AS total, row_number() OVER (ORDER BY o.published_at) AS rn
    FROM outbox o
    WHERE o.published_at >= %(since)s AND o.published_at < %(cutoff)s
      AND NOT EXISTS (SELECT 1 FROM events e WHERE e.event_id = o.event_id
                                                AND e.committed_at = o.created_at)
) g WHERE rn <= %(sample)s

-- name: gaps_missing_delivery
-- A subscribed endpoint without a delivery row. "Subscribed" is the fanout's rule
-- (fanout.sql create_deliveries) applied to today's endpoint rows: same tenant, not
-- disabled, created before the event was stored, and one event_types entry that is
-- '*', the type itself, or 'prefix.*' with the type starting with 'prefix.'.
-- An endpoint disabled since is not expected (its status at fan-out time is not
-- recorded); see docs/operations-reconcile.md for what that can hide.
SELECT kind, key, detail, total FROM (
    SELECT 'missing_delivery' AS kind,
           ev.event_id::text || '/' || ep.id::text AS key,
           'tenant ' || ev.tenant || ', type ' || ev.type || ', stored '
               || ev.stored_at::text AS detail,
           count(*) OVER () AS total,
           row_number() OVER (ORDER BY ev.stored_at) AS rn
    FROM outbox o
    JOIN events ev ON ev.event_id = o.event_id AND ev.committed_at = o.created_at
    JOIN endpoints ep ON ep.tenant = ev.tenant AND ep.status <> 'disabled'
                     AND ep.status <> 'deleted'
                     AND ep.created_at <= ev.stored_at
    WHERE o.published_at >= %(since)s AND o.published_at < %(cutoff)s
      AND EXISTS (
          SELECT 1 FROM unnest(ep.event_types) AS f(pattern)
          WHERE f.pattern = '*'
             OR f.pattern = ev.type
             OR (right(f.pattern, 2) = '.*' AND starts_with(ev.type, left(f.pattern, -1))))
      AND NOT EXISTS (
          SELECT 1 FROM deliveries d WHERE d.event_id = ev.event_id AND d.endpoint_id = ep.id
                                       AND d.committed_at = ev.committed_at)
) g WHERE rn <= %(sample)s

-- name: delivery_states
-- Every delivery of the window, by what explains its state. Verdicts starting with
-- 'gap:' are unexplained: an in_flight row whose lease expired (the reaper releases
-- those within seconds) or a pending row of an active endpoint overdue by more than
-- stall_s. Deferred and scheduled work carries its due time in next_attempt_at (the
-- dispatcher writes it when it defers), so "overdue" means no task will run it soon:
-- its task was lost, and the sweeper re-queues it after HOOKSTREAM_SWEEP_AFTER_S.
-- A parked row (a backlog held for a later slot of its endpoint's drain schedule) is a
-- gap too when its endpoint is active and takes nothing: none of its deliveries in
-- flight and no attempt of it started within stall_s — its work is held while it idles
-- (the dispatcher hands parked rows to an endpoint that runs out of work; issue #47).
-- Samples name the endpoint.
WITH d AS (
    SELECT d.delivery_id, d.endpoint_id, d.status, d.attempts, d.next_attempt_at,
           d.lease_expires_at, d.parked
    FROM outbox o JOIN deliveries d ON d.event_id = o.event_id AND d.committed_at = o.created_at
    WHERE o.published_at >= %(since)s AND o.published_at < %(cutoff)s
),
idle AS (
    -- per endpoint with parked rows in the window (few): one probe of
    -- deliveries_endpoint_status, and the attempts of the last stall_s by started_at
    SELECT h.endpoint_id
    FROM (SELECT DISTINCT endpoint_id FROM d WHERE status = 'pending' AND parked) h
    WHERE NOT EXISTS (SELECT 1 FROM deliveries y
                      WHERE y.endpoint_id = h.endpoint_id AND y.status = 'in_flight')
      AND NOT EXISTS (SELECT 1 FROM attempts a
                      JOIN deliveries y ON y.delivery_id = a.delivery_id
                                       AND y.committed_at = a.committed_at
                      WHERE a.started_at > now() - make_interval(secs => %(stall_s)s)
                        AND y.endpoint_id = h.endpoint_id)
),
v AS (
    SELECT d.delivery_id, d.endpoint_id,
        CASE
            WHEN d.status IN ('delivered', 'dead', 'failed', 'superseded') THEN d.status
            WHEN d.status = 'in_flight' AND d.lease_expires_at < now()
                - make_interval(secs => %(stall_s)s) THEN 'gap:in_flight_lease_expired'
            WHEN d.status = 'in_flight' THEN 'in_flight'
            WHEN d.parked AND ep.status = 'active' AND d.endpoint_id IN (SELECT endpoint_id FROM idle)
                AND NOT coalesce(ep.paused_until > now() - make_interval(secs => %(stall_s)s),
                                 false)
                THEN 'gap:held_while_idle'
            WHEN d.next_attempt_at >= now() - make_interval(secs => %(stall_s)s) THEN
                CASE WHEN d.attempts = 0 THEN 'pending: new' ELSE 'pending: retry scheduled' END
            WHEN ep.status = 'disabled' THEN 'pending: endpoint disabled'
            -- its history is being removed by a delete operation
            WHEN ep.status = 'deleted' THEN 'pending: endpoint deleted'
            -- held by its owner, or behind an open circuit (deferred until it closes)
            WHEN ep.status = 'paused' OR ep.paused_until
                > now() - make_interval(secs => %(stall_s)s) THEN 'pending: endpoint paused'
            ELSE 'gap:pending_stalled'
        END AS verdict
    FROM d
    JOIN endpoints ep ON ep.id = d.endpoint_id
)
SELECT verdict, count(*) AS n,
       (array_agg(delivery_id::text || ' (endpoint ' || endpoint_id::text || ')')
            FILTER (WHERE verdict LIKE 'gap:%%'))[1:%(sample)s] AS sample
FROM v GROUP BY verdict ORDER BY verdict

-- name: gaps_attempts
-- Attempt rows against their delivery: numbered 1..attempts without holes; only the
-- current attempt of an in_flight delivery may itself be in flight (claim, outcome and
-- reaper each move both rows in one statement); a delivered row has a 2xx attempt.
SELECT kind, key, detail, total FROM (
    SELECT kind, key, detail, count(*) OVER (PARTITION BY kind) AS total,
           row_number() OVER (PARTITION BY kind ORDER BY key) AS rn
    FROM (
        SELECT unnest(ARRAY[
                   CASE WHEN coalesce(s.n, 0) <> d.attempts
                          OR coalesce(s.mx, 0) <> d.attempts THEN 'attempt_rows_mismatch' END,
                   CASE WHEN s.open_stale > 0 THEN 'attempt_left_open' END,
                   CASE WHEN d.status = 'delivered' AND coalesce(s.ok, 0) = 0
                        THEN 'delivered_without_success' END]) AS kind,
               d.delivery_id::text AS key,
               'status ' || d.status || ', attempts ' || d.attempts || ', rows '
                   || coalesce(s.n, 0) AS detail
        FROM outbox o
        JOIN deliveries d ON d.event_id = o.event_id AND d.committed_at = o.created_at
        LEFT JOIN LATERAL (
            SELECT count(*) AS n, max(a.attempt_no) AS mx,
                   count(*) FILTER (WHERE a.outcome = 'delivered') AS ok,
                   count(*) FILTER (WHERE a.outcome = 'in_flight'
                                    AND NOT (d.status = 'in_flight'
                                             AND a.attempt_no = d.attempts)) AS open_stale
            FROM attempts a
            WHERE a.delivery_id = d.delivery_id AND a.committed_at = d.committed_at
        ) s ON true
        WHERE o.published_at >= %(since)s AND o.published_at < %(cutoff)s
    ) x WHERE kind IS NOT NULL
) g WHERE rn <= %(sample)s

-- name: attempt_counts
-- For the harness-side check: attempt rows per delivery (= webhook-id).
SELECT delivery_id::text AS delivery_id, count(*) AS n
FROM attempts WHERE delivery_id = ANY(%(ids)s::uuid[])
GROUP BY delivery_id

-- name: delivered_ids
SELECT delivery_id::text AS delivery_id
FROM deliveries WHERE status = 'delivered' AND endpoint_id = ANY(%(endpoints)s::uuid[])
