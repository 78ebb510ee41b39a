"""How long the fanout waits for company once a batch has started.

At moderate load it takes what is there and goes (a batch of one when one event came):
latency is the sum of the hops. Batches still grow with load by themselves — what
arrives while one batch is written forms the next — but each batch costs round trips
and commits in PostgreSQL and Kafka whatever its size, CPU the dispatcher needs when
the machine is saturated (issue #15: 0.025 → 0.045 fanout CPU-ms per delivery once the
0.5 s batches were gone). Two reasons to wait; the longer wait wins.

**Load** (``load_gather_s``): above ``from_per_s`` deliveries/s of this process's own
tasks, a wait growing to a cap at twice that rate. Small batches make every hop
downstream dearer — each a produce request per partition it touches (librdkafka sends
one partition per request), smaller task fetches, smaller claims, more commits — and
the dispatchers fall behind first: at 3,600 offered deliveries/s batches of ~27 events
left the machine 90 % busy and the dispatchers seconds behind, where 0.1 s of gathering
(batches of ~115) ran it at 78 % with commit → arrival p99 0.33 s (benchmarks/pipeline.py;
BENCHMARKS.md, Pipeline). The load is known at once; the dispatchers' lag says so only once
they are already behind. Below ``from_per_s`` (#15's 1,000/s included) nothing changes.

**Downstream lag** (``gather_s``): waiting costs nothing when the deliveries would wait
downstream anyway: when even the dispatcher group's least-behind partition is seconds
behind, a delivery created a few milliseconds later is attempted no later. So the wait
is a small fraction of that smallest downstream lag (the least-behind partition is where
a new delivery would wait least), nothing below a dead zone (an idle group still shows
up to a commit interval of lag, and one slow customer's pinned partition is not
"behind": the minimum ignores it), and capped. Unknown lag: no wait. 5 % and a 0.5 s cap
(settings.FanoutSettings) rather than 1 % and 0.1 s: at saturation batches of ~165
events instead of ~90, fanout CPU per delivery 0.021–0.022 ms instead of 0.025
(benchmarks/pipeline.py; BENCHMARKS.md, Pipeline), and the saturated pipeline's
throughput back at the code before #15's.

Pure: the lag, the throughput and the times come in.
"""

from __future__ import annotations

from collections import deque

DEAD_ZONE_S = 2.0  # smallest downstream lag that counts as "behind"
FRACTION = 0.05  # of that lag, the wait: at most 5 % added to what deliveries wait anyway


def gather_s(smallest_lag_s: float | None, cap_s: float, *, dead_zone_s: float = DEAD_ZONE_S,
             fraction: float = FRACTION) -> float:
    """Seconds to wait for more events once a batch has some; 0 = take what is there."""
    if smallest_lag_s is None or cap_s <= 0 or smallest_lag_s < dead_zone_s:
        return 0.0
    return min(cap_s, fraction * smallest_lag_s)


def load_gather_s(per_s: float, from_per_s: float, cap_s: float) -> float:
    """Seconds to wait for company at a throughput of ``per_s`` deliveries/s: nothing up
    to ``from_per_s``, then linearly more up to ``cap_s`` at twice that rate (no step:
    a load hovering at the threshold does not flip between two behaviours). A zero
    ``from_per_s`` or ``cap_s`` turns it off."""
    if from_per_s <= 0 or cap_s <= 0 or per_s <= from_per_s:
        return 0.0
    return min(cap_s, cap_s * (per_s - from_per_s) / from_per_s)


class Throughput:
    """Items per second over the last ``window_s``: what was added within the window,
    divided by the whole window (a process that just started reads low, never high)."""

    def __init__(self, window_s: float = 1.0):
        if window_s <= 0:
            raise ValueError(f"window_s must be positive, got {window_s}")
        self.window_s = window_s
        self._added: deque[tuple[float, int]] = deque()
        self._total = 0

    def add(self, n: int, now: float) -> None:
        if n > 0:
            self._added.append((now, n))
            self._total += n

    def per_s(self, now: float) -> float:
        start = now - self.window_s
        while self._added and self._added[0][0] <= start:
            self._total -= self._added.popleft()[1]
        return self._total / self.window_s
