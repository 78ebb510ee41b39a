-- A slow endpoint's backlog beyond what it drains within the horizon is parked here, in
-- PostgreSQL (the durable truth), instead of being recirculated through Kafka's delay
-- tiers: a parked delivery has no task anywhere, and the dispatcher's sweeper hands it
-- back to the queue when its slot in the endpoint's drain schedule (next_attempt_at)
-- comes. One record per release instead of a deferral, its tier hops and its return.
-- A constant default: PostgreSQL adds the column without rewriting the table.
ALTER TABLE deliveries ADD COLUMN parked boolean NOT NULL DEFAULT false;
