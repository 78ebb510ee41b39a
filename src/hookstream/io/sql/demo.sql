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
