-- Issue #14: a day partition's statistics follow its backlog. Autovacuum analyzes a table
-- once a tenth of it has changed since the last analyze; today's deliveries partition was
-- analyzed while it was nearly empty and all delivered, and a backlog of tens of
-- thousands of pending rows then looked like none to the planner (the status partial
-- indexes' sizes too): a statement joining a batch to deliveries read every pending row
-- of the day (benchmarks.history_scale; tests/integration/test_hot_queries_bounded.py).
-- The batch statements no longer depend on those figures; the coalescing, the console
-- and the API's plans still do. Each deliveries and attempts partition is analyzed after
-- a fixed number of changed rows instead, whatever its size: a busy day is re-analyzed
-- about once per autovacuum round (a minute), a quiet one rarely. An analyze reads a
-- sample of 30,000 rows however big the partition; it takes no lock writers wait on.
CREATE FUNCTION hookstream_history_analyze_settings(p_table regclass) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE format('ALTER TABLE %s SET (autovacuum_analyze_scale_factor = 0,'
                   ' autovacuum_analyze_threshold = 10000)', p_table);
END $$;

SELECT hookstream_history_analyze_settings(i.inhrelid::regclass)
FROM pg_inherits i
WHERE i.inhparent IN ('deliveries'::regclass, 'attempts'::regclass);

DROP FUNCTION hookstream_history_partitions(date, date, text[]);

CREATE FUNCTION hookstream_history_partitions(
    p_from date, p_to date,
    p_tables text[] DEFAULT ARRAY['events', 'deliveries', 'attempts']) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    day date;
    parent text;
    part text;
    strays boolean;
    made integer := 0;
    lo timestamptz;
    hi timestamptz;
BEGIN
    IF NOT p_tables <@ ARRAY['events', 'deliveries', 'attempts'] THEN
        RAISE EXCEPTION 'hookstream_history_partitions: unknown table in %', p_tables;
    END IF;
    day := p_from;
    WHILE day < p_to LOOP
        lo := day::timestamp AT TIME ZONE 'UTC';
        hi := (day + 1)::timestamp AT TIME ZONE 'UTC';
        FOREACH parent IN ARRAY p_tables LOOP
            part := parent || '_p' || to_char(day, 'YYYYMMDD');
            CONTINUE WHEN to_regclass(part) IS NOT NULL;
            EXECUTE format('SELECT EXISTS (SELECT 1 FROM %I WHERE committed_at >= $1'
                           ' AND committed_at < $2)', parent || '_default')
                INTO strays USING lo, hi;
            IF strays THEN
                EXECUTE format('CREATE TABLE %I (LIKE %I INCLUDING DEFAULTS INCLUDING CONSTRAINTS)',
                               part, parent);
                EXECUTE format('WITH m AS (DELETE FROM %I WHERE committed_at >= $1'
                               ' AND committed_at < $2 RETURNING *) INSERT INTO %I SELECT * FROM m',
                               parent || '_default', part) USING lo, hi;
                EXECUTE format('ALTER TABLE %I ATTACH PARTITION %I FOR VALUES FROM (%L) TO (%L)',
                               parent, part, lo, hi);
            ELSE
                EXECUTE format('CREATE TABLE %I PARTITION OF %I FOR VALUES FROM (%L) TO (%L)',
                               part, parent, lo, hi);
            END IF;
            -- the rows of events are written once and never change: the defaults serve
            IF parent <> 'events' THEN
                PERFORM hookstream_history_analyze_settings(part::regclass);
            END IF;
            made := made + 1;
        END LOOP;
        day := day + 1;
    END LOOP;
    RETURN made;
END $$;
