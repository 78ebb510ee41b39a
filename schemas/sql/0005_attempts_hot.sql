-- Cheaper attempt rows (issue #4, measured in BENCHMARKS.md).
--
-- An attempt row is inserted by the claim, before the POST, and completed after it. The
-- completion now changes no indexed column (started_at stays the claim's time, which is
-- when the dispatcher began the attempt; latency_ms is the request's own duration), so
-- PostgreSQL can update the row in place (a HOT update: no new entries in attempts_pkey
-- and attempts_started_at) — provided the row's page has room for the completed
-- version. The fill factor keeps that room on every page written from now on.
ALTER TABLE attempts SET (fillfactor = 80);
