"""Existing topics against the settings: pure, so the comparison is tested without Kafka.

``hookstream topics`` leaves an existing topic alone (Kafka cannot shrink partitions, and
changing replication is a reassignment an operator plans), but it must not call a topic
"done" when it differs from what the settings ask: a topic with RF 1 on a cluster makes
acks=all protect nothing, and fewer partitions cap how far the consumers scale out.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from hookstream.core.topics import TopicSpec

MIN_ISR = "min.insync.replicas"


@dataclass(frozen=True)
class ObservedTopic:
    """What the broker says of one topic."""

    name: str
    # The replica count of each partition, in partition order (a partition being
    # reassigned can differ from the rest, so each is kept).
    replicas: tuple[int, ...]
    # The topic's effective min.insync.replicas (its own or the broker's default);
    # None when the broker did not say.
    min_insync_replicas: int | None


@dataclass(frozen=True)
class Mismatch:
    topic: str
    what: str  # "partitions", "replication factor" or "min.insync.replicas"
    found: str
    wanted: int

    def line(self) -> str:
        return f"{self.topic}: {self.what} is {self.found}, the settings want {self.wanted}"


def _replication(replicas: tuple[int, ...]) -> str:
    counts = sorted(set(replicas))
    if len(counts) == 1:
        return str(counts[0])
    # Mixed counts: name the partitions of each, so the operator sees which to fix.
    return ", ".join(
        f"{c} (partitions {','.join(str(p) for p, r in enumerate(replicas) if r == c)})"
        for c in counts)


def mismatches(spec: TopicSpec, observed: ObservedTopic) -> list[Mismatch]:
    """How ``observed`` differs from ``spec``: partition count, replicas of every
    partition, and min.insync.replicas when the spec sets it."""
    found: list[Mismatch] = []
    if len(observed.replicas) != spec.partitions:
        found.append(Mismatch(spec.name, "partitions", str(len(observed.replicas)),
                              spec.partitions))
    if any(r != spec.replication_factor for r in observed.replicas):
        found.append(Mismatch(spec.name, "replication factor",
                              _replication(observed.replicas), spec.replication_factor))
    wanted_isr = spec.config.get(MIN_ISR)
    if wanted_isr is not None and observed.min_insync_replicas != int(wanted_isr):
        shown = "unknown" if observed.min_insync_replicas is None else \
            str(observed.min_insync_replicas)
        found.append(Mismatch(spec.name, MIN_ISR, shown, int(wanted_isr)))
    return found


def check_existing(specs: Iterable[TopicSpec],
                   observed: Mapping[str, ObservedTopic]) -> list[Mismatch]:
    """Every mismatch of the topics in ``observed``; a spec not observed is not checked
    (the caller has just created it)."""
    return [m for s in specs if s.name in observed for m in mismatches(s, observed[s.name])]
