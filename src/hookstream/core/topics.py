"""Topic names and their shapes: pure, so services, the stack and tests agree."""

from __future__ import annotations

from dataclasses import dataclass

from hookstream.policy.tiers import Tiers


@dataclass(frozen=True)
class TopicSpec:
    name: str
    partitions: int
    config: dict[str, str]
    # 1 suits a single broker (the local stack, most tests); a cluster's topics take it,
    # and min.insync.replicas in ``config``, from the settings (``Topics.specs``).
    replication_factor: int = 1


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

    def specs(self, partitions: int = 6, replication_factor: int = 1,
              min_insync_replicas: int = 1) -> list[TopicSpec]:
        if partitions < 1 or replication_factor < 1 or min_insync_replicas < 1:
            raise ValueError("partitions, replication factor and min ISR must be >= 1, got "
                             f"{partitions}/{replication_factor}/{min_insync_replicas}")
        if min_insync_replicas > replication_factor:
            # The broker would take it and then refuse every acks=all write.
            raise ValueError(f"min.insync.replicas {min_insync_replicas} exceeds the "
                             f"replication factor {replication_factor}")
        # Every topic, the dead letters included, is replicated alike: with acks=all a
        # record counts as durable once min.insync.replicas brokers have it.
        durable = {"min.insync.replicas": str(min_insync_replicas)}
        # A week of retention is far beyond any consumer outage we plan for; the durable
        # truth is PostgreSQL, the topics are the work queue.
        keep = {**durable, "retention.ms": str(7 * 24 * 3600 * 1000)}
        dead = {**durable, "retention.ms": str(30 * 24 * 3600 * 1000)}
        rf = replication_factor
        return [
            TopicSpec(self.events, partitions, keep, rf),
            TopicSpec(self.deliveries, partitions, keep, rf),
            TopicSpec(self.dead, 1, dead, rf),
            # Tier partitions mirror the deliveries topic's so a hop keeps the key's spread.
            *(TopicSpec(t, partitions, keep, rf) for t in self.tiers.topics),
        ]
