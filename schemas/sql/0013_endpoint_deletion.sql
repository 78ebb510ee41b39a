-- Deleting an endpoint returns at once (issue #14). The API marks the endpoint 'deleted'
-- in one short transaction (one row, no cascade) and answers 202 with a 'delete'
-- operation; the operation then removes the endpoint's attempts and deliveries in
-- batches of a few thousand rows, each its own short transaction, and the endpoint row
-- (with its secrets) last. A 'deleted' endpoint takes no new delivery (fanout), no
-- attempt (the dispatcher's claim), no sweep; the API answers 404 for it and for its
-- deliveries at once, whatever is still waiting to be removed.
-- The CHECK is replaced rather than altered (PostgreSQL cannot alter one); validating it
-- reads the endpoints table, thousands of rows, under the migration's lock.
ALTER TABLE endpoints DROP CONSTRAINT endpoints_status_check;
ALTER TABLE endpoints ADD CONSTRAINT endpoints_status_check
    CHECK (status IN ('active', 'paused', 'disabled', 'deleted'));

ALTER TABLE operations DROP CONSTRAINT operations_kind_check;
ALTER TABLE operations ADD CONSTRAINT operations_kind_check
    CHECK (kind IN ('replay', 'recover', 'delete'));

-- A repeated DELETE answers with the endpoint's delete operation, also after the
-- endpoint row is gone (operations keep endpoint_id without a foreign key): one probe.
CREATE INDEX operations_endpoint_deletes ON operations (endpoint_id, created_at)
    WHERE kind = 'delete';
