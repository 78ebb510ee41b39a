-- hookstream: durable records. Applied by `hookstream migrate` inside one
-- transaction and recorded in schema_migrations, so running it twice is harmless.

-- Outbox: written by producers in the same transaction as their business change.
CREATE TABLE outbox (
    id              bigserial PRIMARY KEY,
    event_id        uuid        NOT NULL UNIQUE,
    tenant          text        NOT NULL,
    type            text        NOT NULL,
    schema_version  integer     NOT NULL DEFAULT 1,
    object_id       text,
    object_version  bigint,
    coalescing_key  text,
    occurred_at     timestamptz NOT NULL DEFAULT now(),
    payload         bytea       NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT now(),
    published_at    timestamptz,
    quarantined_at  timestamptz,
    quarantine_reason text
);

-- The relay only ever scans the unpublished, unquarantined head.
CREATE INDEX outbox_pending ON outbox (id)
    WHERE published_at IS NULL AND quarantined_at IS NULL;
CREATE INDEX outbox_published_at ON outbox (published_at) WHERE published_at IS NOT NULL;

-- One NOTIFY per inserting statement (not per row) wakes the relay within milliseconds;
-- the payload is empty because the relay re-reads the table anyway.
CREATE FUNCTION hookstream_outbox_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('hookstream_outbox', '');
    RETURN NULL;
END $$;

CREATE TRIGGER outbox_notify AFTER INSERT ON outbox
    FOR EACH STATEMENT EXECUTE FUNCTION hookstream_outbox_notify();

-- For producers that are not Python: call inside your own transaction.
--   SELECT hookstream_emit('acme', 'invoice.paid', '{"id": 1}'::jsonb, 'inv_1', 3);
CREATE FUNCTION hookstream_emit(
    p_tenant text,
    p_type text,
    p_payload jsonb,
    p_object_id text DEFAULT NULL,
    p_object_version bigint DEFAULT NULL,
    p_coalescing_key text DEFAULT NULL,
    p_event_id uuid DEFAULT gen_random_uuid(),
    p_schema_version integer DEFAULT 1
) RETURNS uuid LANGUAGE sql AS $$
    INSERT INTO outbox (event_id, tenant, type, schema_version, object_id, object_version,
                        coalescing_key, payload)
    VALUES (p_event_id, p_tenant, p_type, p_schema_version, p_object_id, p_object_version,
            p_coalescing_key, convert_to(p_payload::text, 'UTF8'))
    RETURNING event_id
$$;

CREATE TABLE endpoints (
    id                   uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    tenant               text        NOT NULL,
    url                  text        NOT NULL,
    description          text        NOT NULL DEFAULT '',
    status               text        NOT NULL DEFAULT 'active'
                         CHECK (status IN ('active', 'paused', 'disabled')),
    -- exact types ('invoice.paid'), prefix wildcards ('invoice.*') or '*'
    event_types          text[]      NOT NULL DEFAULT '{*}',
    rate_per_s           double precision NOT NULL DEFAULT 50 CHECK (rate_per_s > 0),
    burst                integer     NOT NULL DEFAULT 100 CHECK (burst > 0),
    max_in_flight        integer     NOT NULL DEFAULT 4 CHECK (max_in_flight > 0),
    coalesce             boolean     NOT NULL DEFAULT true,
    config_version       integer     NOT NULL DEFAULT 1,
    consecutive_failures integer     NOT NULL DEFAULT 0,
    first_failure_at     timestamptz,
    paused_until         timestamptz,
    disabled_reason      text,
    created_at           timestamptz NOT NULL DEFAULT now(),
    updated_at           timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX endpoints_tenant ON endpoints (tenant) WHERE status <> 'disabled';

-- Versioned secrets: the previous one stays valid until expires_at (rotation overlap).
CREATE TABLE endpoint_secrets (
    endpoint_id  uuid        NOT NULL REFERENCES endpoints (id) ON DELETE CASCADE,
    version      integer     NOT NULL,
    secret       text        NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    expires_at   timestamptz,
    PRIMARY KEY (endpoint_id, version)
);

-- The immutable event as published: replay never rebuilds a past event from current state.
CREATE TABLE events (
    event_id        uuid        PRIMARY KEY,
    tenant          text        NOT NULL,
    type            text        NOT NULL,
    schema_version  integer     NOT NULL,
    object_id       text,
    object_version  bigint,
    coalescing_key  text,
    occurred_at     timestamptz NOT NULL,
    committed_at    timestamptz NOT NULL,
    payload         bytea       NOT NULL,
    payload_sha256  bytea       NOT NULL,
    stored_at       timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX events_tenant_time ON events (tenant, occurred_at);

-- An event that arrived again with the same id but different bytes: rejected and kept here.
CREATE TABLE event_conflicts (
    id              bigserial   PRIMARY KEY,
    event_id        uuid        NOT NULL,
    payload_sha256  bytea       NOT NULL,
    seen_at         timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE deliveries (
    delivery_id             uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    event_id                uuid        NOT NULL REFERENCES events (event_id),
    endpoint_id             uuid        NOT NULL REFERENCES endpoints (id) ON DELETE CASCADE,
    tenant                  text        NOT NULL,
    endpoint_config_version integer     NOT NULL,
    status                  text        NOT NULL DEFAULT 'pending'
                            CHECK (status IN ('pending', 'in_flight', 'delivered', 'failed',
                                              'dead', 'superseded')),
    attempts                integer     NOT NULL DEFAULT 0,
    next_attempt_at         timestamptz NOT NULL DEFAULT now(),
    expires_at              timestamptz NOT NULL,
    -- bumped by every claim: a queue message that carries an older lease is stale
    lease_version           integer     NOT NULL DEFAULT 0,
    lease_expires_at        timestamptz,
    coalescing_key          text,
    last_error              text,
    created_at              timestamptz NOT NULL DEFAULT now(),
    updated_at              timestamptz NOT NULL DEFAULT now(),
    delivered_at            timestamptz,
    UNIQUE (event_id, endpoint_id)
);
CREATE INDEX deliveries_endpoint_status ON deliveries (endpoint_id, status, created_at);
CREATE INDEX deliveries_pending_age ON deliveries (created_at)
    WHERE status IN ('pending', 'in_flight');
CREATE INDEX deliveries_lease ON deliveries (lease_expires_at) WHERE status = 'in_flight';

CREATE TABLE attempts (
    delivery_id     uuid        NOT NULL REFERENCES deliveries (delivery_id) ON DELETE CASCADE,
    attempt_no      integer     NOT NULL,
    started_at      timestamptz NOT NULL,
    -- NULL while in flight: a row is written when the attempt starts, so a receiver's
    -- duplicate after a crashed dispatcher is still explained by an attempt row
    finished_at     timestamptz,
    status_code     integer,
    latency_ms      double precision,
    error_class     text,
    outcome         text        NOT NULL,
    response_excerpt text,
    manual          boolean     NOT NULL DEFAULT false,
    PRIMARY KEY (delivery_id, attempt_no)
);
CREATE INDEX attempts_started_at ON attempts (started_at);
