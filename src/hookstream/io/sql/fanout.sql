-- name: store_events
-- Events are stored once and never rewritten: a second copy is a no-op here and is
-- compared by hash afterwards (stored_hashes). Arrays travel in binary format: the text
-- form of a bytea array was the fanout's largest Python cost in the profile.
INSERT INTO events (event_id, tenant, type, schema_version, object_id, object_version,
                    coalescing_key, occurred_at, committed_at, payload, payload_sha256)
SELECT * FROM unnest(%(event_id)b::uuid[], %(tenant)b::text[], %(type)b::text[],
                     %(schema_version)b::int[], %(object_id)b::text[],
                     %(object_version)b::bigint[], %(coalescing_key)b::text[],
                     %(occurred_at)b::timestamptz[], %(committed_at)b::timestamptz[],
                     %(payload)b::bytea[], %(sha)b::bytea[])
-- (event_id, committed_at): the partitioned table's key (0014); every copy of an event
-- the relay publishes carries its outbox row's commit time, so this dedupes them all.
ON CONFLICT (event_id, committed_at) DO NOTHING
RETURNING event_id

-- name: store_and_create
-- The common batch in one statement, one commit (issue #15: the second round trip was
-- ~1.6 ms of the median at 1,000 deliveries/s): the events stored as store_events does,
-- and the delivery rows of the events stored *now*, as create_deliveries does for a
-- first pass. An event already stored (a relay duplicate, a fanout restarted half way,
-- or the same id with other bytes) gets no row here: the fanout compares its copy by
-- hash and fans out the identical ones with create_deliveries, as before. Deliveries
-- have no foreign key to events (0014), so both inserts can share the statement.
-- Returns the created rows as create_deliveries does, then one row per event stored now
-- with a NULL delivery id. Its m and ins are create_deliveries' (less the `again` flag):
-- tests/unit/test_queries.py keeps the two alike.
WITH stored AS (
    INSERT INTO events (event_id, tenant, type, schema_version, object_id, object_version,
                        coalescing_key, occurred_at, committed_at, payload, payload_sha256)
    SELECT * FROM unnest(%(event_id)b::uuid[], %(tenant)b::text[], %(type)b::text[],
                         %(schema_version)b::int[], %(object_id)b::text[],
                         %(object_version)b::bigint[], %(coalescing_key)b::text[],
                         %(occurred_at)b::timestamptz[], %(committed_at)b::timestamptz[],
                         %(payload)b::bytea[], %(sha)b::bytea[])
    ON CONFLICT (event_id, committed_at) DO NOTHING
    RETURNING event_id
),
c AS (
    SELECT * FROM unnest(%(c_event_id)b::uuid[], %(c_tenant)b::text[], %(c_type)b::text[],
                         %(c_coalescing_key)b::text[], %(c_committed_at)b::timestamptz[],
                         %(c_after)b::uuid[], %(c_upto)b::uuid[])
        AS c(event_id, tenant, type, coalescing_key, committed_at, after, upto)
    WHERE c.event_id IN (SELECT event_id FROM stored)
),
m AS MATERIALIZED (
    SELECT c.event_id, c.committed_at, ep.id AS endpoint_id, ep.tenant,
           ep.config_version, CASE WHEN ep.coalesce THEN c.coalescing_key END AS coalescing_key
    FROM c
    JOIN endpoints ep ON ep.tenant = c.tenant AND ep.status <> 'disabled'
        AND ep.status <> 'deleted'
        AND (c.after IS NULL OR ep.id > c.after) AND (c.upto IS NULL OR ep.id <= c.upto)
    WHERE hookstream_type_matches(ep.event_types, c.type)
),
ins AS (
    INSERT INTO deliveries (event_id, endpoint_id, tenant, endpoint_config_version,
                            expires_at, coalescing_key, committed_at)
    SELECT event_id, endpoint_id, tenant, config_version,
           committed_at + make_interval(secs => %(window_s)s), coalescing_key, committed_at
    FROM m
    ON CONFLICT (event_id, endpoint_id, committed_at) DO NOTHING
    RETURNING delivery_id, event_id, endpoint_id, tenant, lease_version, coalescing_key
)
SELECT delivery_id::text, event_id::text, endpoint_id::text, uuid_send(endpoint_id),
       tenant, lease_version, coalescing_key, true AS created
FROM ins
UNION ALL
SELECT NULL, event_id::text, NULL, NULL, NULL, NULL, NULL, false
FROM stored

-- name: stored_hashes
-- Pruned to the events' partitions by their commit times.
SELECT e.event_id, e.payload_sha256
FROM unnest(%(ids)b::uuid[], %(committed_at)b::timestamptz[]) AS x(event_id, committed_at)
JOIN events e ON e.event_id = x.event_id AND e.committed_at = x.committed_at

-- name: record_conflict
INSERT INTO event_conflicts (event_id, payload_sha256) VALUES (%(event_id)s, %(sha)s)

-- name: audiences
-- How many endpoints each (tenant, type) of the batch reaches, and every page-th of
-- their ids in order: the fanout plans statements of bounded size from this (plan.py).
-- Disabled and deleted endpoints reach nothing; paused ones do (their rows wait). The two
-- inequalities (not NOT IN) keep the partial indexes on status <> 'disabled' provable.
WITH k AS (
    SELECT DISTINCT * FROM unnest(%(tenant)s::text[], %(type)s::text[]) AS k(tenant, type)
),
m AS (
    SELECT k.tenant, k.type, ep.id,
           row_number() OVER (PARTITION BY k.tenant, k.type ORDER BY ep.id) AS n
    FROM k
    JOIN endpoints ep ON ep.tenant = k.tenant AND ep.status <> 'disabled'
        AND ep.status <> 'deleted'
    WHERE hookstream_type_matches(ep.event_types, k.type)
)
SELECT tenant, type, count(*) AS rows,
       coalesce(array_agg(id ORDER BY id) FILTER (WHERE n %% %(page)s = 0), '{}') AS boundaries
FROM m
GROUP BY tenant, type

-- name: create_deliveries
-- One row per (event, matching endpoint in the slice's id range); UNIQUE (event_id,
-- endpoint_id, committed_at) — as unique as (event_id, endpoint_id), see 0014 — makes a second pass over an event create only what is missing and
-- leave existing rows untouched. Returns the rows that need a task: every row created
-- now, and, for events seen before (`again`: a relay duplicate or a fanout restarted
-- half way), the rows of the range still pending — the first pass may have died
-- before producing their tasks. (The second SELECT sees the snapshot before the
-- INSERT, so the two halves never overlap.) The coalescing key is kept only for
-- endpoints that coalesce, so only their rows can ever be superseded.
WITH c AS (
    SELECT * FROM unnest(%(event_id)b::uuid[], %(tenant)b::text[], %(type)b::text[],
                         %(coalescing_key)b::text[], %(committed_at)b::timestamptz[],
                         %(again)b::bool[], %(after)b::uuid[], %(upto)b::uuid[])
        AS c(event_id, tenant, type, coalescing_key, committed_at, again, after, upto)
),
m AS MATERIALIZED (
    SELECT c.event_id, c.again, c.committed_at, ep.id AS endpoint_id, ep.tenant,
           ep.config_version, CASE WHEN ep.coalesce THEN c.coalescing_key END AS coalescing_key
    FROM c
    JOIN endpoints ep ON ep.tenant = c.tenant AND ep.status <> 'disabled'
        AND ep.status <> 'deleted'
        AND (c.after IS NULL OR ep.id > c.after) AND (c.upto IS NULL OR ep.id <= c.upto)
    WHERE hookstream_type_matches(ep.event_types, c.type)
),
ins AS (
    INSERT INTO deliveries (event_id, endpoint_id, tenant, endpoint_config_version,
                            expires_at, coalescing_key, committed_at)
    SELECT event_id, endpoint_id, tenant, config_version,
           committed_at + make_interval(secs => %(window_s)s), coalescing_key, committed_at
    FROM m
    ON CONFLICT (event_id, endpoint_id, committed_at) DO NOTHING
    RETURNING delivery_id, event_id, endpoint_id, tenant, lease_version, coalescing_key
)
SELECT delivery_id::text, event_id::text, endpoint_id::text, uuid_send(endpoint_id),
       tenant, lease_version, coalescing_key, true AS created
FROM ins
UNION ALL
SELECT d.delivery_id::text, d.event_id::text, d.endpoint_id::text, uuid_send(d.endpoint_id),
       d.tenant, d.lease_version, d.coalescing_key, false
FROM m
JOIN deliveries d ON d.event_id = m.event_id AND d.endpoint_id = m.endpoint_id
    AND d.committed_at = m.committed_at
    AND d.committed_at = ANY(%(committed_at)b::timestamptz[])  -- plan-time pruning
-- CASE, not d.status = 'pending': a test the planner cannot match to the status partial
-- indexes, whose statistics can be older than the day's backlog. With it, each row of
-- m probed deliveries_pending_age whole (10 M rows read for 10 events against a backlog
-- of 20 k); now it is one probe of the unique key per row.
WHERE m.again AND CASE d.status WHEN 'pending' THEN true ELSE false END

-- name: coalesce
-- Seed 000's coalescing: for every (endpoint, key) that just got a delivery, keep only
-- the delivery of the newest event among those still pending (not in flight: an
-- in-flight row is 'in_flight', so it is never touched) and mark the others
-- superseded, pointing at the one kept. "Newest" is the entity's object_version when
-- the events carry one, else the commit time, then the event id (a total order, so
-- two fanouts always agree). An older event arriving late is itself superseded at
-- once. The status re-check in the UPDATE loses nothing to a dispatcher claiming a row
-- at the same moment: whoever updates first wins, the other sees the new status.
WITH touched AS (
    SELECT DISTINCT * FROM unnest(%(endpoint_id)s::uuid[], %(key)s::text[])
        AS t(endpoint_id, coalescing_key)
),
ranked AS (
    SELECT d.delivery_id, d.committed_at,
           first_value(d.delivery_id) OVER (
               PARTITION BY d.endpoint_id, d.coalescing_key
               ORDER BY e.object_version DESC NULLS LAST, e.committed_at DESC,
                        d.event_id DESC) AS newest
    FROM touched t
    JOIN deliveries d ON d.endpoint_id = t.endpoint_id
        AND d.coalescing_key = t.coalescing_key AND d.status = 'pending'
    JOIN events e ON e.event_id = d.event_id AND e.committed_at = d.committed_at
)
UPDATE deliveries d
SET status = 'superseded', superseded_by = r.newest, updated_at = now()
FROM ranked r
WHERE d.delivery_id = r.delivery_id AND d.committed_at = r.committed_at
  AND r.delivery_id <> r.newest AND d.status = 'pending'
RETURNING d.delivery_id::text
