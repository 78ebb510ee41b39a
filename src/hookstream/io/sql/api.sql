-- The control-plane API's queries. Tenant isolation lives here: every tenant-scoped
-- query takes %(tenant)s, NULL for an operator key, and filters on it, so another
-- tenant's row is simply not found.

-- name: principal
SELECT id, tenant FROM api_keys WHERE key_sha256 = %(sha)s AND revoked_at IS NULL

-- name: create_tenant
INSERT INTO tenants (id, name) VALUES (%(id)s, %(name)s)
ON CONFLICT (id) DO NOTHING
RETURNING id, name, created_at

-- name: tenant_exists
SELECT EXISTS (SELECT 1 FROM tenants WHERE id = %(tenant)s) AS exists

-- name: list_tenants
SELECT id, name, created_at FROM tenants
WHERE id > coalesce(%(after)s::text, '')
ORDER BY id
LIMIT %(limit)s

-- name: create_api_key
INSERT INTO api_keys (tenant, name, prefix, key_sha256)
VALUES (%(tenant)s, %(name)s, %(prefix)s, %(sha)s)
RETURNING id, tenant, name, prefix, created_at, revoked_at

-- name: list_api_keys
-- all: every key (operator keys included) when the caller asks for no tenant
SELECT id, tenant, name, prefix, created_at, revoked_at FROM api_keys
WHERE (%(all)s OR tenant IS NOT DISTINCT FROM %(tenant)s::text)
ORDER BY created_at, id

-- name: revoke_api_key
UPDATE api_keys SET revoked_at = now()
WHERE id = %(id)s AND revoked_at IS NULL
RETURNING id, tenant, name, prefix, created_at, revoked_at

-- name: insert_endpoint
INSERT INTO endpoints (tenant, url, description, event_types, rate_per_s, burst,
                       max_in_flight, "coalesce")
VALUES (%(tenant)s, %(url)s, %(description)s, %(event_types)s, %(rate_per_s)s, %(burst)s,
        %(max_in_flight)s, %(coalesce)s)
RETURNING *

-- name: insert_first_secret
INSERT INTO endpoint_secrets (endpoint_id, version, secret_key_id, secret_sealed)
VALUES (%(id)s, 1, %(key_id)s, %(sealed)s)

-- name: get_endpoint
-- A deleted endpoint is gone for the API at once (404), while its delete operation
-- removes its history in the background (0013_endpoint_deletion.sql).
SELECT * FROM endpoints
WHERE id = %(id)s AND (%(tenant)s::text IS NULL OR tenant = %(tenant)s)
  AND status <> 'deleted'

-- name: lock_endpoint
-- Serialises changes of one endpoint (status moves, rotations) against each other.
SELECT * FROM endpoints
WHERE id = %(id)s AND (%(tenant)s::text IS NULL OR tenant = %(tenant)s)
  AND status <> 'deleted'
FOR UPDATE

-- name: list_endpoints
SELECT * FROM endpoints
WHERE (%(tenant)s::text IS NULL OR tenant = %(tenant)s)
  AND (%(status)s::text[] IS NULL OR status = ANY(%(status)s::text[]))
  AND status <> 'deleted'
  AND (created_at, id) > (%(after_at)s::timestamptz, %(after_id)s::uuid)
ORDER BY created_at, id
LIMIT %(limit)s

-- name: update_endpoint
-- NULL leaves a field as it is; config_version moves only when something changed, so a
-- delivery records which configuration it was made under.
WITH cur AS (
    SELECT * FROM endpoints
    WHERE id = %(id)s AND (%(tenant)s::text IS NULL OR tenant = %(tenant)s)
      AND status <> 'deleted'
    FOR UPDATE
),
new AS (
    SELECT id,
           coalesce(%(url)s::text, url) AS url,
           coalesce(%(description)s::text, description) AS description,
           coalesce(%(event_types)s::text[], event_types) AS event_types,
           coalesce(%(rate_per_s)s::float8, rate_per_s) AS rate_per_s,
           coalesce(%(burst)s::int, burst) AS burst,
           coalesce(%(max_in_flight)s::int, max_in_flight) AS max_in_flight,
           coalesce(%(coalesce)s::boolean, cur."coalesce") AS co
    FROM cur
)
UPDATE endpoints e
SET url = new.url, description = new.description, event_types = new.event_types,
    rate_per_s = new.rate_per_s, burst = new.burst, max_in_flight = new.max_in_flight,
    "coalesce" = new.co,
    config_version = e.config_version + CASE
        WHEN (e.url, e.description, e.event_types, e.rate_per_s, e.burst, e.max_in_flight,
              e."coalesce")
             IS DISTINCT FROM
             (new.url, new.description, new.event_types, new.rate_per_s, new.burst,
              new.max_in_flight, new.co)
        THEN 1 ELSE 0 END,
    updated_at = now()
FROM new
WHERE e.id = new.id
RETURNING e.*

-- name: set_endpoint_status
-- Enabling closes the circuit: failures, pause and reason are cleared.
UPDATE endpoints
SET status = %(status)s,
    paused_until = %(paused_until)s,
    disabled_reason = %(disabled_reason)s,
    consecutive_failures = CASE WHEN %(status)s = 'active' THEN 0 ELSE consecutive_failures END,
    first_failure_at = CASE WHEN %(status)s = 'active' THEN NULL ELSE first_failure_at END,
    config_version = config_version + 1,
    updated_at = now()
WHERE id = %(id)s
RETURNING *

-- name: mark_endpoint_deleted
-- The synchronous half of a delete: one row, no cascade. From this commit on the fanout
-- creates nothing for it, the dispatcher's claim refuses its deliveries, the sweeper and
-- the gauges skip it, and the API answers 404. config_version moves so a dispatcher's
-- cached state is seen as changed on its next refresh.
UPDATE endpoints
SET status = 'deleted', config_version = config_version + 1, updated_at = now()
WHERE id = %(id)s AND (%(tenant)s::text IS NULL OR tenant = %(tenant)s)
  AND status <> 'deleted'
RETURNING id, tenant

-- name: latest_delete_operation
-- A repeated DELETE answers with the operation already under way (or finished: the
-- operation outlives the endpoint row), found through operations_endpoint_deletes.
SELECT * FROM operations
WHERE kind = 'delete' AND endpoint_id = %(id)s
  AND (%(tenant)s::text IS NULL OR tenant = %(tenant)s)
ORDER BY created_at DESC
LIMIT 1

-- name: deleted_endpoint
-- A deleted endpoint whose history is still there (its operation failed, or it was marked
-- by hand): a DELETE starts a new operation for it.
SELECT id, tenant FROM endpoints
WHERE id = %(id)s AND (%(tenant)s::text IS NULL OR tenant = %(tenant)s)
  AND status = 'deleted'

-- name: select_history_batch
-- One batch of a deleted endpoint's deliveries, any order (the whole range goes): the
-- leading endpoint_id of deliveries_endpoint_status bounds it. SKIP LOCKED: a row another
-- transaction holds (a dispatcher writing a late outcome, a replay batch) is left for a
-- later batch, so the job never waits behind anyone's lock nor deadlocks with them.
SELECT delivery_id, committed_at FROM deliveries
WHERE endpoint_id = %(endpoint_id)s
LIMIT %(limit)s
FOR UPDATE SKIP LOCKED

-- name: history_remains
-- After an empty batch: rows left only because others hold them (no new row can appear
-- for a deleted endpoint), so the job waits and tries again instead of finishing.
SELECT EXISTS (SELECT 1 FROM deliveries WHERE endpoint_id = %(endpoint_id)s) AS remains

-- name: delete_history_attempts
-- Explicitly: the partitioned history has no cascading foreign keys (0014). Each row by
-- its full key, so each probe is one partition's index, not every partition's.
DELETE FROM attempts a
USING unnest(%(ids)s::uuid[], %(committed_at)s::timestamptz[]) AS x(id, committed_at)
WHERE a.delivery_id = x.id AND a.committed_at = x.committed_at

-- name: delete_history_deliveries
DELETE FROM deliveries d
USING unnest(%(ids)s::uuid[], %(committed_at)s::timestamptz[]) AS x(id, committed_at)
WHERE d.delivery_id = x.id AND d.committed_at = x.committed_at

-- name: remove_deleted_endpoint
-- The last step, once no delivery refers to it: the row and (ON DELETE CASCADE) its
-- secrets, a handful of rows.
DELETE FROM endpoints WHERE id = %(id)s AND status = 'deleted'

-- name: list_secrets
SELECT version, created_at, expires_at,
       (expires_at IS NULL OR expires_at > now()) AS active
FROM endpoint_secrets
WHERE endpoint_id = %(id)s
ORDER BY version DESC

-- name: rotate_secret
-- Every still-valid secret now expires after the overlap (never later than it already
-- would); the dispatcher signs with all unexpired secrets, so receivers holding either
-- the old or the new secret verify during the overlap. Callers hold lock_endpoint.
WITH expire AS (
    UPDATE endpoint_secrets
    SET expires_at = LEAST(coalesce(expires_at, 'infinity'),
                           now() + make_interval(secs => %(overlap_s)s))
    WHERE endpoint_id = %(id)s AND (expires_at IS NULL OR expires_at > now())
    RETURNING version
)
INSERT INTO endpoint_secrets (endpoint_id, version, secret_key_id, secret_sealed)
SELECT %(id)s, coalesce(max(version), 0) + 1, %(key_id)s, %(sealed)s
FROM endpoint_secrets WHERE endpoint_id = %(id)s
RETURNING version, created_at, expires_at

-- name: revoke_secret
UPDATE endpoint_secrets SET expires_at = now()
WHERE endpoint_id = %(id)s AND version = %(version)s
  AND (expires_at IS NULL OR expires_at > now())
RETURNING version, created_at, expires_at

-- name: endpoint_health
-- Only index ranges of one endpoint (status = ANY over every status keeps the created_at
-- range of deliveries_endpoint_status usable). The counts stop at %(cap)s
-- (hookstream.core.counts): an endpoint failing for weeks holds millions of dead rows,
-- and a health check must not walk them all. The success rate counts the attempts,
-- started in the window, of the endpoint's deliveries created in the window: the
-- endpoint's range is read first (MATERIALIZED), then each delivery's attempts by
-- primary key, so the work is this endpoint's window, never the whole fleet's attempts
-- in it (which attempts_started_at would give the planner as an alternative).
WITH recent AS MATERIALIZED (
    SELECT delivery_id, committed_at FROM deliveries
    WHERE endpoint_id = %(id)s AND status = ANY(%(all_statuses)s)
      AND created_at >= %(window_start)s
)
SELECT
    (SELECT min(created_at) FROM deliveries
     WHERE endpoint_id = %(id)s AND status = 'pending') AS oldest_pending_at,
    least((SELECT count(*) FROM (SELECT 1 FROM deliveries
                                 WHERE endpoint_id = %(id)s AND status = 'pending'
                                 LIMIT %(cap)s + 1) AS c), %(cap)s) AS pending,
    least((SELECT count(*) FROM (SELECT 1 FROM deliveries
                                 WHERE endpoint_id = %(id)s AND status = 'in_flight'
                                 LIMIT %(cap)s + 1) AS c), %(cap)s) AS in_flight,
    least((SELECT count(*) FROM (SELECT 1 FROM deliveries
                                 WHERE endpoint_id = %(id)s AND status = 'dead'
                                 LIMIT %(cap)s + 1) AS c), %(cap)s) AS dead,
    r.delivered, r.finished
FROM (
    SELECT count(*) FILTER (WHERE a.outcome = 'delivered') AS delivered,
           count(*) FILTER (WHERE a.finished_at IS NOT NULL AND a.outcome <> 'lost')
               AS finished
    FROM recent
    -- OFFSET 0 keeps this a per-delivery probe of the attempts primary key: flattened
    -- into a join, the planner hashes every attempt of the fleet started in the window
    -- (an attempts_started_at range: 600 k rows for this endpoint's 30 k on a 2 M
    -- delivery test database), work that grows with the whole fleet, not the endpoint.
    CROSS JOIN LATERAL (
        SELECT a.outcome, a.finished_at FROM attempts a
        WHERE a.delivery_id = recent.delivery_id AND a.committed_at = recent.committed_at
          AND a.started_at >= %(window_start)s
        OFFSET 0
    ) a
) r

-- name: last_error
SELECT a.delivery_id, a.attempt_no, a.finished_at, a.status_code, a.error_class,
       a.outcome, d.last_error AS message
FROM deliveries d JOIN attempts a USING (delivery_id, committed_at)
WHERE d.endpoint_id = %(id)s AND d.status = ANY(%(all_statuses)s)
  AND d.created_at >= %(window_start)s
  AND a.finished_at IS NOT NULL AND a.outcome <> 'delivered'
ORDER BY a.finished_at DESC
LIMIT 1

-- name: list_deliveries
-- Newest first. Each (endpoint, status) pair is one ordered range of
-- deliveries_endpoint_status (endpoint_id, status, created_at): its newest `limit` rows
-- are read backwards from the cursor and the pairs' heads merged, so a page costs
-- endpoints x statuses short index scans however many rows an endpoint holds. One scan
-- with status = ANY(…) would not do: its rows come back ordered by status first, and an
-- endpoint with a million deliveries would be read and sorted whole for every page.
-- Planned with its values on every call (api.store runs it unprepared): a generic plan
-- guesses a few rows per partition range, appends and sorts them whole (0.7 s at 50 k).
-- The page is chosen first and only its rows look up their event (by its full key, one
-- partition each): joined before the LIMIT, the planner misjudges the join on the
-- partitioned events (committed_at follows from event_id, which it cannot know) and
-- hashes whole partitions of it.
WITH page AS MATERIALIZED (
SELECT d.delivery_id, d.event_id, d.endpoint_id, d.tenant, d.endpoint_config_version,
       d.status, d.attempts, d.next_attempt_at, d.expires_at, d.last_error, d.created_at,
       d.updated_at, d.delivered_at, d.committed_at
FROM endpoints ep
CROSS JOIN unnest(%(statuses)s::text[]) AS s(status)
CROSS JOIN LATERAL (
    SELECT * FROM deliveries d
    WHERE d.endpoint_id = ep.id AND d.status = s.status
      AND d.created_at >= %(since)s AND d.created_at < %(until)s
      AND (d.created_at, d.delivery_id) < (%(before_at)s::timestamptz, %(before_id)s::uuid)
    ORDER BY d.created_at DESC, d.delivery_id DESC
    LIMIT %(limit)s) d
WHERE (%(tenant)s::text IS NULL OR ep.tenant = %(tenant)s)
  AND (%(endpoint_id)s::uuid IS NULL OR ep.id = %(endpoint_id)s::uuid)
  AND ep.status <> 'deleted'
  AND (%(tenant)s::text IS NULL OR d.tenant = %(tenant)s)
ORDER BY d.created_at DESC, d.delivery_id DESC
LIMIT %(limit)s
)
SELECT p.delivery_id, p.event_id, p.endpoint_id, p.tenant, p.endpoint_config_version,
       p.status, p.attempts, p.next_attempt_at, p.expires_at, p.last_error, p.created_at,
       p.updated_at, p.delivered_at, ev.type AS event_type
FROM page p
CROSS JOIN LATERAL (SELECT e.type FROM events e
                    WHERE e.event_id = p.event_id AND e.committed_at = p.committed_at) ev
ORDER BY p.created_at DESC, p.delivery_id DESC

-- name: get_delivery
SELECT d.delivery_id, d.event_id, d.endpoint_id, d.tenant, d.endpoint_config_version,
       d.status, d.attempts, d.next_attempt_at, d.expires_at, d.last_error, d.created_at,
       d.updated_at, d.delivered_at, ev.type AS event_type
FROM deliveries d
JOIN events ev ON ev.event_id = d.event_id AND ev.committed_at = d.committed_at
-- a deleted endpoint's deliveries are gone for the API with it, before their removal
JOIN endpoints ep ON ep.id = d.endpoint_id AND ep.status <> 'deleted'
WHERE d.delivery_id = %(id)s AND (%(tenant)s::text IS NULL OR d.tenant = %(tenant)s)

-- name: delivery_attempts
SELECT attempt_no, started_at, finished_at, status_code, latency_ms, error_class, outcome,
       response_excerpt, manual
FROM attempts
WHERE delivery_id = %(id)s
ORDER BY attempt_no

-- name: lock_delivery_for_replay
SELECT d.delivery_id, d.status, ep.status AS endpoint_status
FROM deliveries d
JOIN endpoints ep ON ep.id = d.endpoint_id AND ep.status <> 'deleted'
WHERE d.delivery_id = %(id)s AND (%(tenant)s::text IS NULL OR d.tenant = %(tenant)s)
FOR UPDATE OF d

-- name: mark_pending
-- A replay is a new attempt of the same delivery: back to pending with the lease
-- version unchanged, so the task produced with that version claims it like any other.
-- committed_at: the event's, copied onto the row (0014); the task carries it.
UPDATE deliveries d
SET status = 'pending', next_attempt_at = now(), lease_expires_at = NULL, updated_at = now()
WHERE d.delivery_id = ANY(%(ids)s)
  AND d.status = ANY(%(from_statuses)s)
RETURNING d.delivery_id, d.event_id, d.endpoint_id, d.tenant, d.lease_version,
          d.committed_at

-- name: count_replay_batch
SELECT count(*) AS n FROM deliveries
WHERE endpoint_id = %(endpoint_id)s AND status = ANY(%(statuses)s)
  AND created_at >= %(since)s AND created_at < %(until)s

-- name: select_replay_batch
-- Oldest first after the operation's cursor; locked so the status read is the status
-- mark_pending changes.
SELECT delivery_id, created_at FROM deliveries
WHERE endpoint_id = %(endpoint_id)s AND status = ANY(%(statuses)s)
  AND created_at >= %(since)s AND created_at < %(until)s
  AND (created_at, delivery_id) > (%(after_at)s::timestamptz, %(after_id)s::uuid)
ORDER BY created_at, delivery_id
LIMIT %(limit)s
FOR UPDATE

-- name: count_replay_events
-- The "set of events" form: at most a thousand event ids, each an index probe of
-- UNIQUE (event_id, endpoint_id). The tenant filter is belt and braces: the endpoint,
-- found under the caller's tenant, already scopes it.
SELECT count(*) AS n FROM deliveries
WHERE event_id = ANY(%(event_ids)s::uuid[]) AND endpoint_id = %(endpoint_id)s
  AND tenant = %(tenant)s AND status = ANY(%(statuses)s)
  AND created_at >= %(since)s AND created_at < %(until)s

-- name: select_replay_events
-- As select_replay_batch, restricted to the operation's event ids.
SELECT delivery_id, created_at FROM deliveries
WHERE event_id = ANY(%(event_ids)s::uuid[]) AND endpoint_id = %(endpoint_id)s
  AND tenant = %(tenant)s AND status = ANY(%(statuses)s)
  AND created_at >= %(since)s AND created_at < %(until)s
  AND (created_at, delivery_id) > (%(after_at)s::timestamptz, %(after_id)s::uuid)
ORDER BY created_at, delivery_id
LIMIT %(limit)s
FOR UPDATE

-- name: create_operation
INSERT INTO operations (tenant, kind, endpoint_id, params, total, lease_owner,
                        lease_expires_at)
VALUES (%(tenant)s, %(kind)s, %(endpoint_id)s, %(params)s, %(total)s, %(owner)s,
        now() + make_interval(secs => %(lease_s)s))
RETURNING *

-- name: get_operation
SELECT * FROM operations
WHERE id = %(id)s AND (%(tenant)s::text IS NULL OR tenant = %(tenant)s)

-- name: lock_owned_operation
SELECT * FROM operations
WHERE id = %(id)s AND lease_owner = %(owner)s AND status = 'running'
FOR UPDATE

-- name: operation_progress
UPDATE operations
SET cursor_at = %(cursor_at)s, cursor_id = %(cursor_id)s,
    processed = processed + %(processed)s, enqueued = enqueued + %(enqueued)s,
    lease_expires_at = now() + make_interval(secs => %(lease_s)s), updated_at = now()
WHERE id = %(id)s AND lease_owner = %(owner)s

-- name: finish_operation
UPDATE operations
SET status = %(status)s, error = %(error)s, finished_at = now(), updated_at = now(),
    lease_owner = NULL, lease_expires_at = NULL
WHERE id = %(id)s AND lease_owner = %(owner)s AND status = 'running'

-- name: claim_orphaned_operation
-- An operation whose worker stopped renewing its lease (instance died, restarted) is
-- taken over where its cursor stands.
UPDATE operations
SET lease_owner = %(owner)s, lease_expires_at = now() + make_interval(secs => %(lease_s)s),
    updated_at = now()
WHERE id = (
    SELECT id FROM operations
    WHERE status = 'running' AND lease_expires_at < now()
    ORDER BY lease_expires_at
    LIMIT 1
    FOR UPDATE SKIP LOCKED)
RETURNING id

-- name: list_events
-- Oldest first, for reconciliation. The type filter is the fanout's subscription rule.
SELECT event_id, tenant, type, schema_version, object_id, object_version, occurred_at,
       committed_at, payload
FROM events
WHERE tenant = %(tenant)s
  AND occurred_at >= %(since)s AND occurred_at < %(until)s
  AND (occurred_at, event_id) > (%(after_at)s::timestamptz, %(after_id)s::uuid)
  AND (%(patterns)s::text[] IS NULL OR EXISTS (
        SELECT 1 FROM unnest(%(patterns)s::text[]) AS f(pattern)
        WHERE f.pattern = '*'
           OR f.pattern = type
           OR (right(f.pattern, 2) = '.*' AND starts_with(type, left(f.pattern, -1)))))
ORDER BY occurred_at, event_id
LIMIT %(limit)s

-- name: get_event
SELECT event_id, tenant, type, schema_version, object_id, object_version, occurred_at,
       committed_at, payload
FROM events
WHERE event_id = %(id)s AND (%(tenant)s::text IS NULL OR tenant = %(tenant)s)
