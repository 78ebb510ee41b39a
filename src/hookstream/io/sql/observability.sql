-- Gauges derived from PostgreSQL, sampled by one service on a background thread
-- (src/hookstream/ops/db_metrics.py, through ops/metrics_store.py). Each query returns a
-- bounded number of rows whatever the number of endpoints: fixed label sets, or the worst
-- %(limit)s endpoints. They run together in one read-only transaction (snapshot), so the
-- numbers agree with each other.

-- name: snapshot
-- First in the sample's transaction: one read-only snapshot for every query below.
SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY

-- name: pending_by_kind
-- Work waiting for an attempt. "new" was never attempted (the first-attempt SLO is about
-- these), "retry" was attempted before, "held" waits on an endpoint that is paused,
-- disabled or inside an open circuit: it is late by the customer's choice or fault, not
-- ours, so it is kept apart from what the SLO alert watches. "Overdue" counts only rows
-- already due: a retry waiting out its backoff is not late.
SELECT k.kind,
       count(x.created_at) AS rows,
       coalesce(extract(epoch FROM now() - min(x.created_at)), 0)::float8 AS oldest_age_s,
       coalesce(extract(epoch FROM now() - min(x.next_attempt_at)
                        FILTER (WHERE x.next_attempt_at <= now())), 0)::float8 AS most_overdue_s
FROM (VALUES ('new'), ('retry'), ('held')) AS k(kind)
LEFT JOIN (
    SELECT CASE WHEN e.status <> 'active' OR e.paused_until > now() THEN 'held'
                WHEN d.attempts = 0 THEN 'new'
                ELSE 'retry' END AS kind,
           d.created_at, d.next_attempt_at
    FROM deliveries d
    JOIN endpoints e ON e.id = d.endpoint_id
    -- a deleted endpoint's rows wait for their removal (its delete operation), not for
    -- an attempt: they are not work, held or otherwise
    WHERE d.status = 'pending' AND e.status <> 'deleted'
) AS x ON x.kind = k.kind
GROUP BY k.kind
ORDER BY k.kind

-- name: in_flight
SELECT count(*) AS rows,
       count(*) FILTER (WHERE lease_expires_at < now()) AS lease_expired
FROM deliveries
WHERE status = 'in_flight'

-- name: worst_endpoints
-- The endpoints holding the oldest waiting deliveries, the worst %(limit)s of each pool:
-- held (paused, disabled, circuit open: late by the customer's choice or fault, often for
-- days) and not held, so held ones never crowd the live slow ones out. Only tracked
-- endpoints get an `endpoint` label (hookstream.endpoint_series bounds them).
WITH per AS (
    SELECT d.endpoint_id, d.tenant, count(*) AS pending, min(d.created_at) AS oldest,
           (e.status <> 'active' OR coalesce(e.paused_until > now(), false)) AS held
    FROM deliveries d
    JOIN endpoints e ON e.id = d.endpoint_id
    WHERE d.status = 'pending' AND e.status <> 'deleted'
    GROUP BY d.endpoint_id, d.tenant, e.status, e.paused_until
), ranked AS (
    SELECT per.*, row_number() OVER (PARTITION BY held ORDER BY oldest, endpoint_id) AS rn
    FROM per
)
SELECT endpoint_id::text AS endpoint, tenant, pending, held,
       extract(epoch FROM now() - oldest)::float8 AS oldest_age_s
FROM ranked
WHERE rn <= %(limit)s
ORDER BY oldest, endpoint_id

-- name: endpoint_figures
-- Today's figures of the tracked endpoints that are not among the worst any more (0 when
-- nothing waits); an id with no row (or a deleted one) was deleted. Index probes
-- (deliveries_due).
SELECT e.id::text AS endpoint, e.tenant, count(d.delivery_id) AS pending,
       (e.status <> 'active' OR coalesce(e.paused_until > now(), false)) AS held,
       coalesce(extract(epoch FROM now() - min(d.created_at)), 0)::float8 AS oldest_age_s
FROM endpoints e
LEFT JOIN deliveries d ON d.endpoint_id = e.id AND d.status = 'pending'
WHERE e.id = ANY(%(ids)s::uuid[]) AND e.status <> 'deleted'
GROUP BY e.id, e.tenant, e.status, e.paused_until

-- name: endpoints_overdue
-- How many endpoints have due work waiting longer than each threshold (held endpoints
-- left out, as above). A handful: those customers are slow or failing. Many: the
-- platform is short of capacity (or stuck).
SELECT t.over_s, count(o.endpoint_id) AS endpoints
FROM unnest(%(thresholds)s::float8[]) AS t(over_s)
LEFT JOIN (
    SELECT d.endpoint_id,
           extract(epoch FROM now() - min(d.next_attempt_at))::float8 AS overdue_s
    FROM deliveries d
    JOIN endpoints e ON e.id = d.endpoint_id
    WHERE d.status = 'pending' AND d.next_attempt_at <= now()
      AND e.status = 'active' AND (e.paused_until IS NULL OR e.paused_until <= now())
    GROUP BY d.endpoint_id
) AS o ON o.overdue_s > t.over_s
GROUP BY t.over_s
ORDER BY t.over_s

-- name: dead
-- Dead letters pile up for the whole history window (millions at seed 002's scale), so
-- an exact count would walk all of deliveries_dead every scrape: it stops at %(cap)s
-- (hookstream.core.counts; %(cap)s means "at least"). What the alert needs, how many went
-- dead lately, is exact and bounded by the window: a range of deliveries_dead, whose
-- leading column is updated_at (a dead row is not updated again until it is replayed,
-- which makes it pending and takes it out of the index).
SELECT least((SELECT count(*) FROM (SELECT 1 FROM deliveries WHERE status = 'dead'
                                    LIMIT %(cap)s + 1) AS capped), %(cap)s) AS rows,
       (SELECT count(*) FROM deliveries
        WHERE status = 'dead'
          AND updated_at >= now() - make_interval(secs => %(window_s)s)) AS in_window

-- name: endpoints_by_status
SELECT s.status, count(e.id) AS endpoints
FROM (VALUES ('active'), ('paused'), ('disabled')) AS s(status)
LEFT JOIN endpoints e ON e.status = s.status
GROUP BY s.status
ORDER BY s.status

-- name: circuits
-- An open circuit is an active endpoint inside its pause (paused_until in the future);
-- "failing" ones have consecutive failures but are not paused (closed or probing).
SELECT count(*) FILTER (WHERE paused_until > now()) AS open,
       count(*) FILTER (WHERE consecutive_failures > 0
                          AND (paused_until IS NULL OR paused_until <= now())) AS failing,
       coalesce(extract(epoch FROM now() - min(coalesce(first_failure_at, updated_at))
                        FILTER (WHERE paused_until > now())), 0)::float8 AS longest_open_s
FROM endpoints
WHERE status = 'active'

-- name: attempts_slice
-- One slice of the retry-amplification window: the attempts started in (after, upto],
-- upto being %(settle_s)s before now (an attempt row is written by the claim with the
-- claim's time, committed a moment later: a slice ending at now() would miss the ones
-- still committing). The caller (ops/db_metrics.py, core/window_totals.py) sums slices,
-- so each sample reads the seconds since the last one, not the whole window: at seed
-- 002's scale a 15-minute window is ~2 M attempts. Amplification = automatic attempts
-- ÷ automatic first attempts (the deliveries attempted); replays are counted apart.
-- One attempts_started_at range per day partition.
WITH b AS (SELECT extract(epoch FROM now())::float8 - %(settle_s)s AS upto)
SELECT b.upto,
       count(a.*) FILTER (WHERE NOT a.manual) AS automatic,
       count(a.*) FILTER (WHERE a.manual) AS manual,
       count(a.*) FILTER (WHERE NOT a.manual AND a.attempt_no = 1) AS first
FROM b
LEFT JOIN attempts a
    -- never more than the window back: the first slice, or after a pause that long
    ON a.started_at > to_timestamp(greatest(%(after)s::float8, b.upto - %(window_s)s))
   AND a.started_at <= to_timestamp(b.upto)
GROUP BY b.upto
