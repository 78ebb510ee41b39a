"""Capped counts: a figure that would cost a scan of an unbounded set stops at a cap.

At seed 002's scale the dead letters of 30 days, an outbox backlog during a long Kafka
outage or one endpoint's dead history run to millions of rows; an exact ``count(*)``
of them walks every one of those index entries on every scrape or request. The queries
count at most ``COUNT_CAP + 1`` rows (``SELECT count(*) FROM (SELECT 1 ... LIMIT n)``)
and report ``min(count, COUNT_CAP)``: exact below the cap, ``COUNT_CAP`` meaning "at
least that many" above it. Where an alert needs to see change above the cap, a
window-bounded figure sits beside the capped one (``hookstream_deliveries_dead_in_window``).
"""

from __future__ import annotations

COUNT_CAP = 10_000
