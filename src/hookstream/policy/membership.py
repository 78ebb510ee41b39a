"""Is a consumer stuck outside its group? Decided from librdkafka's statistics.

After a long broker outage a librdkafka consumer normally rejoins by itself. Not always:
librdkafka has a history of members left looping outside the group once the coordinator
came back (confluentinc/librdkafka#2944, #3082, #3396), and this project's own outage
test once saw a dispatcher that never rejoined — the sweeper re-queued its work onto a
topic nobody read, with /healthz green. A member is judged stuck when, for longer than
``stuck_after_s``, it has not been a steady member (``cgrp.join_state`` "steady") although
its group coordinator is reachable (the ``GroupCoordinator`` pseudo-broker is "UP"):
then recreating the consumer is the fix (it joins afresh and resumes from the committed
offsets). While the coordinator is away nothing is judged: that is an outage, which a
new consumer would not end.

A legitimate rebalance finishes in seconds (cooperative-sticky, every member polls at
least every second), so the bound is generous on purpose: it only catches what would
otherwise last forever.

Pure: the statistics arrive parsed, the clock comes in.
"""

from __future__ import annotations

from dataclasses import dataclass

STUCK_AFTER_S = 60.0


@dataclass(frozen=True, slots=True)
class GroupStats:
    """What one statistics report says about the consumer's group membership."""

    state: str  # cgrp.state: "up" once the coordinator is known
    join_state: str  # cgrp.join_state: "steady" once joined and assigned
    coordinator_up: bool  # the GroupCoordinator connection is UP

    @property
    def member(self) -> bool:
        return self.state == "up" and self.join_state == "steady"


def group_stats(stats: dict[str, object]) -> GroupStats | None:
    """From librdkafka's statistics JSON (parsed); None for a consumer without a group."""
    cgrp = stats.get("cgrp")
    if not isinstance(cgrp, dict):
        return None
    brokers = stats.get("brokers")
    coordinator = brokers.get("GroupCoordinator") if isinstance(brokers, dict) else None
    up = isinstance(coordinator, dict) and coordinator.get("state") == "UP"
    return GroupStats(str(cgrp.get("state", "")), str(cgrp.get("join_state", "")), up)


class MembershipWatch:
    """Fed every statistics report; ``stuck`` once the member has been outside its group
    with the coordinator reachable for over ``stuck_after_s`` (until ``reset``)."""

    def __init__(self, stuck_after_s: float = STUCK_AFTER_S):
        self.stuck_after_s = stuck_after_s
        self.member = False
        self._outside_since: float | None = None
        self._stuck = False

    def observe(self, stats: GroupStats | None, now_s: float) -> None:
        if stats is None:
            return
        self.member = stats.member
        if stats.member or not stats.coordinator_up:
            # A member, or an outage: the clock (re)starts when the coordinator is back.
            self._outside_since = None
            return
        if self._outside_since is None:
            self._outside_since = now_s
        elif now_s - self._outside_since > self.stuck_after_s:
            self._stuck = True

    @property
    def stuck(self) -> bool:
        return self._stuck

    def outside_for(self, now_s: float) -> float:
        return 0.0 if self._outside_since is None else now_s - self._outside_since

    def reset(self) -> None:
        """A new consumer: it gets the whole bound again."""
        self.member, self._outside_since, self._stuck = False, None, False
