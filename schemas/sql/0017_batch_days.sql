-- Issue #15: the days a batch of rows lives in, as bounds the planner reads while it plans.
-- The batch statements (dispatcher.sql, sweeper.sql) pruned to their days with
-- committed_at = ANY(the batch's commit times). That prunes, but PostgreSQL also takes it
-- as a restriction independent of delivery_id = ANY(the batch's ids) and multiplies the
-- two: a claim of 200 rows was estimated at 1 row. On that estimate each join to the batch
-- ran as a nested loop with the batch inside — the claim compared every row with every
-- task (39,800 rows removed by its join filter for 200 tasks), probed endpoints by a
-- sequential scan per row, and its takeover update walked all 200 ids per probe: three
-- costs that grow with the square of the batch (EXPLAIN ANALYZE;
-- benchmarks/batch_statements.py, BENCHMARKS.md, Batch statements).
-- committed_at between the first and the last day's bounds prunes to those days (every
-- day between too: a batch mixing a weeks-old manual replay with today's rows probes
-- each partition between, one index probe per id) and is, for the planner, the whole of
-- each day's partition: the estimate is the batch, the joins hash the batch once. Both
-- functions are immutable, so a plan made with the batch's values
-- (hookstream.io.pg.plan_with_values) holds their results as constants; a generic plan
-- computes them once when it starts and still prunes then. UTC days, as the
-- partitions (0014). An empty array gives NULL bounds, which select nothing.
-- PL/pgSQL, not SQL: the planner folds the calls with the batch's values, and an SQL
-- function's body is parsed and planned again on each call (0.2–0.3 ms of planning
-- per statement measured), where PL/pgSQL keeps its query's plan for the session.
CREATE FUNCTION hookstream_days_from(p_at timestamptz[]) RETURNS timestamptz
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $$
DECLARE
    first timestamptz;
BEGIN
    SELECT min(x) INTO first FROM unnest(p_at) x;
    RETURN date_trunc('day', first AT TIME ZONE 'UTC') AT TIME ZONE 'UTC';
END
$$;

CREATE FUNCTION hookstream_days_until(p_at timestamptz[]) RETURNS timestamptz
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $$
DECLARE
    last timestamptz;
BEGIN
    SELECT max(x) INTO last FROM unnest(p_at) x;
    RETURN (date_trunc('day', last AT TIME ZONE 'UTC') + interval '1 day') AT TIME ZONE 'UTC';
END
$$;
