-- The relay claims a batch of outbox rows in one short statement and publishes it outside
-- any transaction (a broker outage must not hold row locks or pin vacuum's horizon for as
-- long as the relay waits for acknowledgements). A claim names its claimer's token, which
-- the claiming session holds as an advisory lock: a relay that dies (or loses its
-- connection) releases the lock with its session, and its rows are claimable again at
-- once. claimed_until bounds a claimer that is alive but stuck.
ALTER TABLE outbox ADD COLUMN claimed_by bigint, ADD COLUMN claimed_until timestamptz;
