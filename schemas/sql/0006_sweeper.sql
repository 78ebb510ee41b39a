-- The sweeper (seed 002's "limpiador"): a pending delivery overdue with no live task is
-- handed back to the queue, whatever lost its task. Index-bounded per endpoint.
CREATE INDEX deliveries_due ON deliveries (endpoint_id, next_attempt_at)
    WHERE status = 'pending';

-- When an endpoint becomes active again (resumed, re-enabled, recovered), the work it held
-- is released at once: the sweeper sends every pending delivery due before this moment,
-- however it is re-activated (API, CLI or a plain UPDATE).
ALTER TABLE endpoints ADD COLUMN released_at timestamptz;

CREATE FUNCTION hookstream_endpoint_released() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.released_at := now();
    RETURN NEW;
END $$;

CREATE TRIGGER endpoints_released BEFORE UPDATE OF status ON endpoints
    FOR EACH ROW WHEN (NEW.status = 'active' AND OLD.status <> 'active')
    EXECUTE FUNCTION hookstream_endpoint_released();
