-- `hookstream demo` (hookstream.dev.demo, run by dev/demo_store.py): what it reads of the
-- demo database to wait for the deliveries and to report on them.

-- name: delivery_progress
-- (delivered, all) delivery rows.
SELECT count(*) FILTER (WHERE status = 'delivered'), count(*) FROM deliveries

-- name: by_status
-- Per status: rows, distinct (event, endpoint) pairs, attempts.
SELECT d.status, count(*), count(DISTINCT (d.event_id, d.endpoint_id)), sum(d.attempts)
FROM deliveries d GROUP BY d.status

-- name: delivered_ids
SELECT delivery_id FROM deliveries WHERE status = 'delivered'

-- name: finished_attempts_of_tenant
-- The containers' egress check: every finished attempt to one tenant's endpoints, with
-- where it went and how it ended.
SELECT e.url, a.status_code, a.error_class, a.outcome
FROM attempts a
JOIN deliveries d ON d.delivery_id = a.delivery_id
JOIN endpoints e ON e.id = d.endpoint_id
WHERE d.tenant = %s AND a.finished_at IS NOT NULL
ORDER BY e.url, a.attempt_no

-- name: status_counts_of_tenant
-- The containers' drain check: one tenant's deliveries by status.
SELECT status, count(*) FROM deliveries WHERE tenant = %s GROUP BY status
