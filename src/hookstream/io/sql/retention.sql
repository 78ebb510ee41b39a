-- History maintenance (hookstream.ops.retention, run by ops/retention_store.py): the day
-- partitions of events, deliveries and attempts (0014), made ahead and dropped whole. The
-- statements that name a partition or a parent table are built in retention_store.py;
-- the fixed ones are here. Parameters are positional where the store passes a tuple.
-- No percent sign in a comment: psycopg would read it as a placeholder.

-- name: try_lock
-- One maintenance run at a time across every relay replica and the CLI (session lock).
SELECT pg_try_advisory_lock(%s)

-- name: unlock
SELECT pg_advisory_unlock(%s)

-- name: reset_lock_timeout
RESET lock_timeout

-- name: day_partitions
-- The partitions of events: their names (events_pYYYYMMDD) say which days exist.
SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
WHERE i.inhparent = 'events'::regclass

-- name: table_exists
SELECT to_regclass(%s) IS NOT NULL

-- name: missing_days
-- How many days of [first, end) one parent table has no partition for: a catalog
-- lookup, no lock.
SELECT count(*) FROM generate_series(%s::date, %s::date - 1, interval '1 day') d
WHERE to_regclass(%s || '_p' || to_char(d, 'YYYYMMDD')) IS NULL

-- name: make_partitions
-- The days [first, end) of one parent (0014's function; returns the partitions made).
SELECT hookstream_history_partitions(%s, %s, ARRAY[%s])

-- name: stray_days
-- The days of the rows in the default partitions (no day partition fitted them), from
-- at most cap rows of each.
SELECT DISTINCT (committed_at AT TIME ZONE 'UTC')::date FROM (
 (SELECT committed_at FROM events_default LIMIT %(cap)s)
 UNION ALL (SELECT committed_at FROM deliveries_default LIMIT %(cap)s)
 UNION ALL (SELECT committed_at FROM attempts_default LIMIT %(cap)s)) s

-- name: day_sizes
-- `hookstream history days`: per day (NULL: the default partitions) the three tables'
-- size on disk and the planner's estimate of the deliveries.
SELECT substring(c.relname FROM '_p(\d{8})$') AS day,
 sum(pg_total_relation_size(c.oid)) AS bytes,
 sum(c.reltuples) FILTER (WHERE p.relname = 'deliveries') AS deliveries
FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
JOIN pg_class p ON p.oid = i.inhparent
WHERE p.relname IN ('events', 'deliveries', 'attempts')
GROUP BY 1 ORDER BY 1 NULLS LAST
