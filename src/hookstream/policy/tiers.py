"""Delay tiers: Kafka has no delayed delivery, so a record waits in a tier topic whose
every record has the same delay. Records of one tier partition then become releasable
in append order, and the tier consumer only ever waits on the head record.

A record carries its exact due time. It enters the largest tier not longer than the
time still to wait; when that tier releases it (append time + tier delay) it either is
due, or hops to the tier that fits the remainder. So a record is never released early,
and is late by at most the smallest tier's delay plus processing time.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

DEFAULT_DELAYS_S: tuple[float, ...] = (1.0, 5.0, 30.0, 120.0, 600.0, 3600.0, 4 * 3600.0)


@dataclass(frozen=True)
class Tiers:
    prefix: str = "hookstream"
    delays_s: tuple[float, ...] = DEFAULT_DELAYS_S

    def __post_init__(self) -> None:
        if not self.delays_s or any(not (0 < d < math.inf) for d in self.delays_s):
            raise ValueError("tier delays must be positive and finite")
        if list(self.delays_s) != sorted(set(self.delays_s)):
            raise ValueError("tier delays must be strictly increasing")
        if len(set(self.topics)) != len(self.delays_s):
            raise ValueError("tier delays must differ by at least a millisecond (topic names)")

    def topic(self, delay_s: float) -> str:
        return f"{self.prefix}.delay.{_label(delay_s)}"

    @property
    def topics(self) -> list[str]:
        return [self.topic(d) for d in self.delays_s]

    def delay_of(self, topic: str) -> float:
        for d in self.delays_s:
            if self.topic(d) == topic:
                return d
        raise KeyError(topic)

    def route(self, remaining_s: float) -> float | None:
        """The tier delay for a record that still has ``remaining_s`` to wait; None when it
        is due now. Below the smallest tier it still waits one smallest tier: never early."""
        if remaining_s <= 0:
            return None
        fitting = [d for d in self.delays_s if d <= remaining_s]
        return fitting[-1] if fitting else self.delays_s[0]


def _label(delay_s: float) -> str:
    s = int(delay_s)
    if s != delay_s:
        return f"{round(delay_s * 1000)}ms"
    if s % 3600 == 0:
        return f"{s // 3600}h"
    if s % 60 == 0:
        return f"{s // 60}m"
    return f"{s}s"
