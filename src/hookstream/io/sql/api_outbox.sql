-- The outbox as the control plane shows it: quarantined rows (the relay set them aside
-- with a reason) and putting one back in line after its cause was fixed. Every query
-- filters on the caller's tenant unless it is an operator (%(tenant)s NULL): another
-- tenant's rows are simply not found.

-- name: list_quarantined
-- Newest first; the partial index outbox_quarantined (0009) holds exactly these rows.
SELECT event_id, tenant, type, schema_version, object_id, object_version, occurred_at,
       created_at, quarantined_at, quarantine_reason, octet_length(payload) AS payload_bytes
FROM outbox
WHERE quarantined_at IS NOT NULL AND published_at IS NULL
  AND (%(tenant)s::text IS NULL OR tenant = %(tenant)s)
  AND (quarantined_at, event_id) < (%(before_at)s::timestamptz, %(before_id)s::uuid)
ORDER BY quarantined_at DESC, event_id DESC
LIMIT %(limit)s

-- name: get_outbox_row
SELECT event_id, tenant, type, schema_version, object_id, object_version, occurred_at,
       created_at, quarantined_at, quarantine_reason, published_at,
       octet_length(payload) AS payload_bytes, payload
FROM outbox
WHERE event_id = %(id)s AND (%(tenant)s::text IS NULL OR tenant = %(tenant)s)

-- name: requeue
-- Back in line: unquarantined and unclaimed, so the relay's next claim takes it. The
-- relay checks it again; a row whose cause was not fixed is quarantined again.
UPDATE outbox
SET quarantined_at = NULL, quarantine_reason = NULL, claimed_by = NULL, claimed_until = NULL
WHERE event_id = %(id)s AND (%(tenant)s::text IS NULL OR tenant = %(tenant)s)
  AND quarantined_at IS NOT NULL AND published_at IS NULL
RETURNING event_id

-- name: wake_relay
-- The relay LISTENs on this channel (the insert trigger's); without it, its poll finds
-- the row within HOOKSTREAM_RELAY_POLL_INTERVAL_S anyway.
SELECT pg_notify('hookstream_outbox', '')
