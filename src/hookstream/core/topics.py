"""Topic names and their shapes: pure, so services, the stack and tests agree."""

from __future__ import annotations

from dataclasses import dataclass

from hookstream.policy.tiers import Tiers


@dataclass(frozen=True)
class TopicSpec:
    name: str
    partitions: int
    config: dict[str, str]


@dataclass(frozen=True)
class Topics:
    prefix: str = "hookstream"

    @property
    def events(self) -> str:
        return f"{self.prefix}.events"

    @property
    def deliveries(self) -> str:
        return f"{self.prefix}.deliveries"

    @property
    def dead(self) -> str:
        return f"{self.prefix}.dead"

    @property
    def tiers(self) -> Tiers:
        return Tiers(self.prefix)

    def for_delay(self, delay_s: float) -> str:
        """Where a task due in ``delay_s`` goes: the largest delay tier that fits, or the
        deliveries topic when it is due within the smallest tier."""
        hop = self.tiers.route(delay_s)
        return self.deliveries if hop is None else self.tiers.topic(hop)

    def specs(self, partitions: int = 6) -> list[TopicSpec]:
        # A week of retention is far beyond any consumer outage we plan for; the durable
        # truth is PostgreSQL, the topics are the work queue.
        keep = {"retention.ms": str(7 * 24 * 3600 * 1000)}
        return [
            TopicSpec(self.events, partitions, keep),
            TopicSpec(self.deliveries, partitions, keep),
            TopicSpec(self.dead, 1, {"retention.ms": str(30 * 24 * 3600 * 1000)}),
            # Tier partitions mirror the deliveries topic's so a hop keeps the key's spread.
            *(TopicSpec(t, partitions, keep) for t in self.tiers.topics),
        ]
