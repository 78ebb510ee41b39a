"""How long the fanout waits for company once a batch has started.

At moderate load it takes what is there and goes (a batch of one when one event came):
latency is the sum of the hops. Batches still grow with load by themselves — what
arrives while one batch is written forms the next — but each batch costs round trips
and commits in PostgreSQL and Kafka whatever its size, CPU the dispatcher needs when
the machine is saturated (issue #15: 0.025 → 0.045 fanout CPU-ms per delivery once the
0.5 s batches were gone).

Waiting costs nothing when the deliveries would wait downstream anyway: when even the
dispatcher group's least-behind partition is seconds behind, a delivery created a few
milliseconds later is attempted no later. So the wait is a small fraction of that
smallest downstream lag (the least-behind partition is where a new delivery would wait
least), nothing below a dead zone (an idle group still shows up to a commit interval of
lag, and one slow customer's pinned partition is not "behind": the minimum ignores it),
and capped. Unknown lag: no wait. 5 % and a 0.5 s cap (settings.FanoutSettings) rather
than 1 % and 0.1 s: at saturation batches of ~165 events instead of ~90, fanout CPU per
delivery 0.021–0.022 ms instead of 0.025 (BENCHMARKS.md, 2026-12-05 evening), and the
saturated pipeline's throughput back at the code before #15's (2026-12-06).

Pure: the lag comes in.
"""

from __future__ import annotations

DEAD_ZONE_S = 2.0  # smallest downstream lag that counts as "behind"
FRACTION = 0.05  # of that lag, the wait: at most 5 % added to what deliveries wait anyway


def gather_s(smallest_lag_s: float | None, cap_s: float, *, dead_zone_s: float = DEAD_ZONE_S,
             fraction: float = FRACTION) -> float:
    """Seconds to wait for more events once a batch has some; 0 = take what is there."""
    if smallest_lag_s is None or cap_s <= 0 or smallest_lag_s < dead_zone_s:
        return 0.0
    return min(cap_s, fraction * smallest_lag_s)
