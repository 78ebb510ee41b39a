-- Relay and fan-out (issue #3): coalescing, large fan-outs in endpoint id ranges.
-- (0002 is reserved for the retry/circuit work, 0003 is the control plane.)

-- Coalescing (seed 000): a pending, not-in-flight delivery of the same (endpoint, key)
-- is superseded by the delivery of a newer event; this points at that delivery, so
-- an audit can follow the chain. No foreign key: history tables are to be partitioned
-- by time and dropped by partition, and a pointer into a dropped partition is harmless.
ALTER TABLE deliveries ADD COLUMN superseded_by uuid;

-- The fanout looks up the pending deliveries of one (endpoint, key) for every keyed
-- delivery it creates. Deliberately NOT unique: a row in flight is never superseded,
-- and when that attempt fails and the row returns to 'pending' there are briefly two
-- pending rows of the key (the next event of the key coalesces them again). A unique
-- index would make that retry transition fail in the dispatcher.
CREATE INDEX deliveries_coalesce ON deliveries (endpoint_id, coalescing_key)
    WHERE status = 'pending' AND coalescing_key IS NOT NULL;

-- A large fan-out walks a tenant's endpoints in id ranges (keyset), a few thousand per
-- statement: this index gives each range in order without sorting the whole tenant.
CREATE INDEX endpoints_tenant_id ON endpoints (tenant, id) WHERE status <> 'disabled';

-- Does an endpoint's event-type filter take this type? Exact ('invoice.paid'), prefix
-- wildcard ('invoice.*' takes 'invoice.paid' and 'invoice.line.added', not 'invoice')
-- or '*'. One definition for the fanout's sizing and creating statements; a plain SQL
-- function, so the planner inlines it.
CREATE FUNCTION hookstream_type_matches(patterns text[], event_type text)
RETURNS boolean LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT EXISTS (
        SELECT 1 FROM unnest(patterns) AS f(pattern)
        WHERE f.pattern = '*'
           OR f.pattern = event_type
           OR (right(f.pattern, 2) = '.*' AND starts_with(event_type, left(f.pattern, -1)))
    )
$$;
