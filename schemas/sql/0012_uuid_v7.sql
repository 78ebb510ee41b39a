-- Time-ordered ids (issue #14): new events (from hookstream_emit's default) and deliveries
-- get UUIDv7 ids (RFC 9562: 48 bits of Unix milliseconds, then random bits), so inserts
-- append at the right edge of the primary-key and foreign-key indexes instead of touching
-- a random leaf each (attempts are keyed by (delivery_id, attempt_no), so they follow).
-- Made in PostgreSQL, not Python: the fanout's delivery INSERT ... SELECT and producers in
-- other languages (hookstream_emit) take the column default, so one function serves every
-- writer. PostgreSQL 15 has no uuidv7() (18 does): a v4 UUID with its first 48 bits
-- replaced by the clock, and the version nibble turned from 4 (0100) into 7 (0111) by
-- setting bits 52 and 53. Existing rows keep their v4 ids: both are uuid, nothing reads
-- the version. Ids are unique as before (74 random bits per millisecond).
CREATE FUNCTION hookstream_uuid_v7() RETURNS uuid
LANGUAGE sql VOLATILE PARALLEL SAFE AS $$
    SELECT encode(
        set_bit(set_bit(
            overlay(uuid_send(gen_random_uuid())
                    PLACING substring(int8send(floor(extract(epoch FROM clock_timestamp())
                                                     * 1000)::bigint) FROM 3)
                    FROM 1 FOR 6),
            52, 1), 53, 1),
        'hex')::uuid
$$;

ALTER TABLE deliveries ALTER COLUMN delivery_id SET DEFAULT hookstream_uuid_v7();

-- The SQL producer helper, as in 0009 but for its event id's default.
CREATE OR REPLACE FUNCTION hookstream_emit(
    p_tenant text,
    p_type text,
    p_payload jsonb,
    p_object_id text DEFAULT NULL,
    p_object_version bigint DEFAULT NULL,
    p_coalescing_key text DEFAULT NULL,
    p_event_id uuid DEFAULT hookstream_uuid_v7(),
    p_schema_version integer DEFAULT 1
) RETURNS uuid LANGUAGE plpgsql AS $$
BEGIN
    IF p_tenant IS NULL OR btrim(p_tenant) = '' THEN
        RAISE EXCEPTION 'hookstream_emit: the tenant is empty, so the event would reach no endpoint'
            USING ERRCODE = 'check_violation',
                  HINT = 'pass the tenant the event belongs to as the first argument, '
                         'e.g. hookstream_emit(''acme'', ''invoice.paid'', ''{"id": 1}''::jsonb)';
    END IF;
    INSERT INTO outbox (event_id, tenant, type, schema_version, object_id, object_version,
                        coalescing_key, payload)
    VALUES (p_event_id, p_tenant, p_type, p_schema_version, p_object_id, p_object_version,
            p_coalescing_key, convert_to(p_payload::text, 'UTF8'));
    RETURN p_event_id;
END $$;
