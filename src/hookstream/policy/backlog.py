"""An endpoint's backlog: how much of it stays in memory, and when the rest is due.

Seed 000's arithmetic: an endpoint drains at most its configured rate, and at most its
in-flight cap ÷ its latency when it answers slowly (4 connections at 3 s ≈ 1.3/s). The
dispatcher keeps in memory what the endpoint drains within a short horizon and defers
the rest to a delay tier, each task due when the endpoint's bucket would reach it.

A cursor (the next free slot of the endpoint's drain schedule) makes every deferral due
after the ones deferred before it, so a task coming back from its tier is never deferred
again behind newer ones: each round moves the backlog toward being served (the loop
without progress of issue #12).

When the endpoint speeds up (it was slow, it is fixed), the schedule handed out at the
old pace is compressed toward now by the ratio of the two rates (``catch_up``): its
parked backlog is then served at the new pace, not at the slots the old one gave it.

Pure: no clock (``now`` comes in), no scheduler; the dispatcher's intake carries the
schedule out.
"""

from __future__ import annotations

from dataclasses import dataclass

MIN_RATE_PER_S = 0.001  # a rate of 0 (a paused-by-config endpoint) still gets a schedule
MIN_SLOW_RATE_PER_S = 0.05  # however slow its answers, an endpoint drains this at least


def drain_rate(rate_per_s: float, max_in_flight: int, latency_s: float) -> float:
    """What an endpoint really drains per second: its configured rate (not a throttled
    one: spreading a backlog over a 429-throttled rate parks it for minutes after it
    recovers), or its cap ÷ its latency when that is lower. ``latency_s`` 0: unknown."""
    rate = max(rate_per_s, MIN_RATE_PER_S)
    if latency_s > 0:
        rate = min(rate, max(max_in_flight / latency_s, MIN_SLOW_RATE_PER_S))
    return rate


def kept(max_in_flight: int, rate_per_s: float, horizon_s: float,
         latency_s: float = 0.0) -> int:
    """How many queued tasks stay in memory: at least the cap, so the endpoint never
    idles for want of work; beyond it, what it drains in the horizon *less one latency*.

    A queued task pins its partition's commit point (it is not durable anywhere else)
    until its attempt ends: kept ÷ rate waiting, plus the attempt itself. Keeping what
    drains in ``horizon − latency`` bounds that to the horizon for any endpoint that
    keeps more than its cap; a slow one keeps just its cap, pinning about two of its
    latencies (the request timeout bounds those). The dispatcher group's lag in seconds
    then stays under ~10 s whatever a few slow customers do (issue #13)."""
    return max(max_in_flight, int(rate_per_s * max(0.0, horizon_s - latency_s)))


@dataclass(frozen=True, slots=True)
class DrainSchedule:
    due_s: list[float]  # epoch seconds, one per deferred task, in the order given
    cursor_s: float  # the next free slot after them


def schedule(count: int, *, kept: int, rate_per_s: float, now_s: float,
             cursor_s: float) -> DrainSchedule:
    """Due times for ``count`` tasks deferred behind the ``kept`` ones in memory, spaced
    at the drain rate, never before the slots already handed out (``cursor_s``)."""
    start = max(now_s + kept / rate_per_s, cursor_s)
    return DrainSchedule([start + k / rate_per_s for k in range(count)],
                         start + count / rate_per_s)


# Compress a parked schedule once the endpoint drains at least this many times faster than
# the pace it was planned at: small wobbles of the latency average do not rewrite rows.
CATCH_UP_RATIO = 2.0


def catch_up(planned_rate_s: float, rate_per_s: float, cursor_s: float,
             now_s: float) -> float | None:
    """The factor (< 1) by which to compress the remaining schedule toward ``now_s``, or
    None: nothing planned ahead, or the endpoint is not enough faster than planned."""
    if planned_rate_s <= 0 or cursor_s <= now_s:
        return None
    if rate_per_s < CATCH_UP_RATIO * planned_rate_s:
        return None
    return planned_rate_s / rate_per_s


def compressed(due_s: float, now_s: float, factor: float) -> float:
    """A slot of the schedule after ``catch_up``: the same place in the queue, at the new
    pace (a slot already due stays as it is)."""
    return due_s if due_s <= now_s else now_s + (due_s - now_s) * factor


def smoothed_latency(previous_s: float, sample_s: float) -> float:
    """Moving average of an endpoint's attempt latency (0: none seen yet)."""
    return sample_s if not previous_s else 0.8 * previous_s + 0.2 * sample_s
