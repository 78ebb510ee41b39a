-- The producers' side of the outbox (hookstream.outbox.write_event, run by
-- producer_store.py): one row on the caller's connection, in the caller's transaction.
-- Producers in other languages call hookstream_emit(...) (schemas/sql/0001_init.sql).

-- name: insert_event
-- Positional: event_id, tenant, type, schema_version, object_id, object_version,
-- coalescing_key, occurred_at (NULL: the transaction's time), payload (JSON bytes).
INSERT INTO outbox (event_id, tenant, type, schema_version, object_id, object_version,
 coalescing_key, occurred_at, payload)
 VALUES (%s, %s, %s, %s, %s, %s, %s, coalesce(%s, now()), %s)
