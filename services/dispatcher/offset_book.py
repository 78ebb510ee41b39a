"""Which offsets of the dispatcher's partitions may be committed.

Tasks complete out of order; a partition's offset is committed only up to its lowest
unfinished task (``PartitionOffsets``). The book is read by the rebalance callbacks on
the Kafka thread and by the event loop, so it is guarded by one lock. A task whose
partition was revoked meanwhile completes nothing: the next owner redoes it.
No Kafka here — the service turns ``commits()`` into a commit call.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable
from dataclasses import dataclass

from hookstream.core.codec import DeliveryTask
from hookstream.core.offsets import PartitionOffsets

log = logging.getLogger("hookstream.dispatcher")

TP = tuple[str, int]


@dataclass(slots=True)
class Item:
    """A task read from a partition, and where its offset is tracked."""

    task: DeliveryTask
    tp: TP
    offset: int
    tracker: PartitionOffsets
    consumed_at: float = 0.0  # monotonic, when read from Kafka: the latency budget's start


class OffsetBook:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._trackers: dict[TP, PartitionOffsets] = {}
        self._committed: dict[TP, int] = {}

    # -- rebalancing (Kafka thread) ------------------------------------------------------
    def assigned(self, tps: Iterable[TP]) -> None:
        with self._lock:
            for tp in tps:
                self._trackers[tp] = PartitionOffsets()

    def revoked(self, tps: Iterable[TP]) -> dict[TP, int]:
        """Forget these partitions; returns what is finished and not yet committed (to be
        committed now, before the next owner starts)."""
        commits: dict[TP, int] = {}
        with self._lock:
            for tp in tps:
                tracker = self._trackers.pop(tp, None)
                offset = tracker.committable() if tracker else None
                if offset is not None and offset != self._committed.get(tp):
                    commits[tp] = offset
                self._committed.pop(tp, None)
        return commits

    def lost(self, tps: Iterable[TP]) -> None:
        """Someone else may own them already: forget them, commit nothing."""
        with self._lock:
            for tp in tps:
                self._trackers.pop(tp, None)
                self._committed.pop(tp, None)

    def owned(self) -> frozenset[TP]:
        """The partitions assigned to this member now."""
        with self._lock:
            return frozenset(self._trackers)

    # -- tracking ----------------------------------------------------------------------
    def track_all(self, positions: Iterable[TP | None], offsets: Iterable[int]
                  ) -> list[PartitionOffsets | None]:
        """Each record's partition tracker (None where the position is None), one lock
        per consumed batch."""
        out: list[PartitionOffsets | None] = []
        with self._lock:
            for tp, offset in zip(positions, offsets, strict=True):
                if tp is None:
                    out.append(None)
                    continue
                tracker = self._trackers.get(tp)
                if tracker is not None and tracker.highest is not None \
                        and offset <= tracker.highest:
                    # The consumer went back on this partition (a rebalance whose
                    # callbacks this member never ran: frozen past its session, it was
                    # fenced and rejoined, then read again from the committed offset):
                    # what was tracked belongs to an ownership that ended. A new tracker
                    # — the old items' completions count for nothing, their work is
                    # redone from the committed offset — instead of a crash (seen under
                    # load in test_paused_member: "38 after 66", exit 1).
                    log.warning("partition read again from an earlier offset; its"
                                " uncommitted work is redone", extra={
                                    "topic": tp[0], "partition": tp[1], "offset": offset,
                                    "after": tracker.highest})
                    tracker = None
                    self._committed.pop(tp, None)
                if tracker is None:
                    tracker = self._trackers[tp] = PartitionOffsets()
                tracker.track(offset)
                out.append(tracker)
        return out

    def valid(self, item: Item) -> bool:
        with self._lock:
            return self._trackers.get(item.tp) is item.tracker

    def complete(self, item: Item) -> None:
        self.complete_all((item,))

    def complete_all(self, items: Iterable[Item]) -> None:
        with self._lock:
            trackers = self._trackers
            for item in items:
                if trackers.get(item.tp) is item.tracker:  # else revoked meanwhile
                    item.tracker.complete(item.offset)

    def complete_offsets(self, done: Iterable[tuple[PartitionOffsets, int]]) -> None:
        with self._lock:
            for tracker, offset in done:
                tracker.complete(offset)

    # -- committing --------------------------------------------------------------------
    def commits(self) -> dict[TP, int]:
        """What may be committed now and was not committed yet."""
        with self._lock:
            commits = {}
            for tp, tracker in self._trackers.items():
                offset = tracker.committable()
                if offset is not None and offset != self._committed.get(tp):
                    commits[tp] = offset
            return commits

    def committed(self, commits: dict[TP, int]) -> None:
        with self._lock:
            for tp, offset in commits.items():
                if tp in self._trackers:
                    self._committed[tp] = offset

    def commit_failed(self, failed: dict[TP, int]) -> None:
        """Commits reported failed after ``committed`` counted them: sent again by the
        next ``commits()``, unless a later commit of the partition was sent meanwhile."""
        with self._lock:
            for tp, offset in failed.items():
                if self._committed.get(tp) == offset:
                    del self._committed[tp]
