-- Two things nobody could see before.
--
-- 1. An outbox row with an empty tenant was published, matched no endpoint and went
--    nowhere, silently. The producer now hears it at once, in its own transaction: the
--    SQL helper says why, and the constraint covers every other way in (write_event,
--    a plain INSERT). NOT VALID: rows already there are not checked (an empty-tenant row
--    already published harms nothing), and adding it takes no table scan.
ALTER TABLE outbox ADD CONSTRAINT outbox_tenant_not_blank CHECK (btrim(tenant) <> '') NOT VALID;

CREATE OR REPLACE FUNCTION hookstream_emit(
    p_tenant text,
    p_type text,
    p_payload jsonb,
    p_object_id text DEFAULT NULL,
    p_object_version bigint DEFAULT NULL,
    p_coalescing_key text DEFAULT NULL,
    p_event_id uuid DEFAULT gen_random_uuid(),
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

-- 2. Quarantined rows are listed by the control plane (GET /v1/outbox/quarantined,
--    `hookstream outbox quarantined`), newest first: this index holds just them, so the
--    listing never scans the outbox.
CREATE INDEX outbox_quarantined ON outbox (quarantined_at DESC, event_id DESC)
    WHERE quarantined_at IS NOT NULL AND published_at IS NULL;
