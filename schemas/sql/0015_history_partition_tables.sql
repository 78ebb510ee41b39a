-- Issue #14: hookstream_history_partitions can make one table's day partitions at a
-- time. Making a partition takes its parent's ACCESS EXCLUSIVE lock; doing the three
-- tables in one transaction held the events' lock while waiting for the deliveries'
-- (a dispatcher statement holding deliveries and reading events then waits on us: a
-- lock cycle). The maintenance job (hookstream.ops.retention) now makes each table's
-- partitions in a transaction of its own. Without p_tables, all three, as before.
DROP FUNCTION hookstream_history_partitions(date, date);

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
            made := made + 1;
        END LOOP;
        day := day + 1;
    END LOOP;
    RETURN made;
END $$;
