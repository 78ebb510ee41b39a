"""Which offset of one Kafka partition is safe to commit when work finishes out of order.

A slow endpoint must not block the partition, so messages complete in any order; the
commit may only cover the unbroken prefix of finished offsets, or a crash would skip
unfinished work.
"""

from __future__ import annotations

from collections import deque


class PartitionOffsets:
    def __init__(self) -> None:
        # Tracked offsets in increasing order; finished ones are dropped from the left as
        # soon as nothing unfinished precedes them, so each offset is popped once.
        self._order: deque[int] = deque()
        self._unfinished: set[int] = set()
        self._highest: int | None = None

    @property
    def highest(self) -> int | None:
        """The highest offset tracked (None: none yet)."""
        return self._highest

    def track(self, offset: int) -> None:
        if self._highest is not None and offset <= self._highest:
            raise ValueError(
                f"offsets must be tracked in increasing order: {offset} after {self._highest}"
            )
        if offset < 0:
            raise ValueError(f"offset must be >= 0, got {offset}")
        self._order.append(offset)
        self._unfinished.add(offset)
        self._highest = offset

    def complete(self, offset: int) -> None:
        try:
            self._unfinished.remove(offset)
        except KeyError:
            raise ValueError(
                f"offset {offset} is not pending (never tracked or already completed)"
            ) from None
        while self._order and self._order[0] not in self._unfinished:
            self._order.popleft()
        if len(self._order) > 2 * len(self._unfinished) + 1024:
            # A slow message at the head keeps every finished one behind it in the deque;
            # compacting keeps memory proportional to the unfinished messages, not to the
            # distance from the head (a million deferred tasks behind one slow endpoint).
            # Amortised O(1): it runs when at least half the deque is finished entries.
            self._order = deque(o for o in self._order if o in self._unfinished)

    def committable(self) -> int | None:
        """Kafka's convention: the next offset to read, so a restart resumes there."""
        if self._order:
            return self._order[0]
        if self._highest is None:
            return None
        return self._highest + 1

    def pending_count(self) -> int:
        return len(self._unfinished)
