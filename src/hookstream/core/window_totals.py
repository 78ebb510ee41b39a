"""Totals over a sliding time window, kept from slices read incrementally: the sampler
reads only the attempts started since its last read (seconds of them) instead of the
whole window (at seed 002's scale, 15 minutes are ~2 M attempt rows, every 15 s). Pure:
times are arguments."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Slice:
    upto: float  # epoch seconds: the slice covers (previous upto, upto]
    automatic: int  # attempts the pipeline made
    manual: int  # replays
    first: int  # automatic first attempts: the deliveries attempted


class WindowTotals:
    def __init__(self) -> None:
        self._slices: deque[Slice] = deque()
        # Where the next slice starts (the reader reads at most a window back from its
        # own end: observability.sql attempts_slice).
        self.upto: float | None = None

    def add(self, s: Slice) -> None:
        if self.upto is not None and s.upto <= self.upto:
            return  # nothing new (the clock did not move): keep the totals as they are
        self._slices.append(s)
        self.upto = s.upto

    def totals(self, window_s: float) -> tuple[int, int, int]:
        """(automatic, manual, first) of the slices ending within window_s of the last."""
        if self.upto is None:
            return 0, 0, 0
        start = self.upto - window_s
        while self._slices and self._slices[0].upto <= start:
            self._slices.popleft()
        return (sum(s.automatic for s in self._slices), sum(s.manual for s in self._slices),
                sum(s.first for s in self._slices))
