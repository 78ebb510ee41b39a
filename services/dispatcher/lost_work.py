"""Work that no live task will run, handed back to the queue.

* The **reaper**: a delivery ``in_flight`` whose lease expired (its worker died mid-
  attempt) gets a new task, then its row is released; no transaction is open while the
  broker is awaited.
* The **sweeper** (seed 002's *limpiador*): a ``pending`` delivery of an active endpoint
  overdue by more than ``HOOKSTREAM_SWEEP_AFTER_S`` has lost its task, however that
  happened; one that fell due while its endpoint was paused or disabled is held work,
  sent as soon as the endpoint is active again; a *parked* one (a slow endpoint's backlog,
  see ``backlog``) goes back when its slot in the endpoint's drain schedule comes. Either
  way a new task: a delay, never a loss. Duplicated tasks are harmless (the lease
  version lets only one claim). Only the first kind is a fault: ``swept_total{reason}``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from hookstream.dispatcher.metrics import DispatcherMetrics
from hookstream.dispatcher.store import Store

from hookstream.core.codec import DeliveryTask, TaskKind
from hookstream.core.settings import DispatcherSettings
from hookstream.io.kafka import Record
from hookstream.io.pg import DatabaseUnavailable

log = logging.getLogger("hookstream.dispatcher")
REAP_BATCH = 500
# The most the sweeper waits, beyond its bound, for tasks still unread in Kafka (or for
# a consumer lag it cannot read): a safety net that holds back forever is none.
HOLD_CAP_S = 3600.0


def lost_after_s(sweep_after_s: float, waiting_s: float | None) -> float:
    """How overdue a pending row must be before its task counts as lost: the bound, plus
    the age of the oldest task the dispatcher group has not read yet (a row overdue by
    less may have its task in that backlog — a stopped dispatcher's partitions, a delay
    forwarder behind — and sweeping it would duplicate the task and raise a false
    HookstreamTasksLost; issue #47). Unknown: the cap."""
    return sweep_after_s + (HOLD_CAP_S if waiting_s is None else min(waiting_s, HOLD_CAP_S))


def requeued(topic: str, rows: Sequence[Mapping[str, Any]], now: datetime, *,
             swept: bool, origin: bytes | None = None) -> list[Record]:
    """A task, due now, for each delivery row (reaped or swept)."""
    records = []
    for r in rows:
        # its first attempt, if it never had one: first-attempt latency is true
        kind = TaskKind.NEW if swept and r["attempts"] == 0 else TaskKind.RETRY
        # The event's commit time, from the row: the task finds its row's partition with
        # it (0014), and a swept first attempt's latency is measured from it.
        task = DeliveryTask(
            delivery_id=r["delivery_id"], event_id=r["event_id"], endpoint_id=r["endpoint_id"],
            tenant=r["tenant"], kind=kind, due_at=now, committed_at=r["committed_at"],
            lease_version=r["lease_version"])
        # Provenance for whoever reads the topic (an operator, the fault tests): a task
        # the reaper or the sweeper re-queued is not one a decision of the pipeline made.
        records.append(Record(topic, task.key, task.encode(), headers=[
            ("hookstream-origin", origin or (b"sweeper" if swept else b"reaper"))]))
    return records


class LostWork:
    def __init__(self, *, store: Store, settings: DispatcherSettings, topic: str,
                 metrics: DispatcherMetrics, publish: Callable[[list[Record]], Awaitable[bool]],
                 fail: Callable[[str, BaseException], None],
                 writer_stuck_for: Callable[[float], float],
                 has_room: Callable[[], bool] = lambda: True,
                 tasks_waiting_s: Callable[[], float | None] = lambda: 0.0):
        self._store, self._s, self._topic, self._metrics = store, settings, topic, metrics
        self._publish, self._fail, self._writer_stuck_for = publish, fail, writer_stuck_for
        self._has_room = has_room
        self._tasks_waiting_s = tasks_waiting_s

    async def reap_forever(self) -> None:
        while True:
            await asyncio.sleep(min(5.0, self._s.lease_s / 2))
            await self.reap_once()

    def _outcomes_wait(self) -> bool:
        # This process's outcomes are stuck (the database is away, or the broker their
        # retry records wait for): they go first, so a lease that expired meanwhile is not
        # taken back from an attempt that finished.
        return self._writer_stuck_for(time.time()) > 1.0

    async def reap_once(self) -> int:
        """One round of the reaper; returns the deliveries handed back."""
        async def produce(rows: list[dict[str, Any]]) -> bool:
            # Asked again once the rows are read: the read itself can wait out a whole
            # database outage (for a pooled connection), during which attempts finish
            # whose outcomes then wait too. Nothing is handed back this round.
            if self._outcomes_wait():
                return False
            return await self._publish(requeued(self._topic, rows, datetime.now(UTC),
                                                swept=False))

        if self._outcomes_wait():
            return 0
        try:
            n = await self._store.expired_leases(REAP_BATCH, produce)
        except DatabaseUnavailable as exc:
            self._fail("reaper", exc)
            return 0
        if n:
            self._metrics.reaped.inc(n)
            log.warning("expired leases handed back", extra={"count": n})
        return n

    async def sweep_forever(self) -> None:
        s = self._s
        per_endpoint = max(10, s.sweep_batch // 10)
        more = False
        while True:
            if not more:
                await asyncio.sleep(s.sweep_interval_s)
            more = False
            try:
                after_s = lost_after_s(s.sweep_after_s, self._tasks_waiting_s())
                rows = await self._store.sweep(after_s, per_endpoint, s.sweep_batch)
            except DatabaseUnavailable as exc:
                self._fail("sweeper", exc)
                continue
            # Not acknowledged (shutdown): the rows are due again after the bound.
            if rows and await self._publish(requeued(self._topic, rows, datetime.now(UTC),
                                                     swept=True)):
                # A full batch (or an endpoint at its share) means more is due now: sweep
                # again at once while the dispatcher has room for it. A parked backlog
                # then comes back at the pace its slots come, not at SWEEP_BATCH per
                # interval (200/s: the tail of every saturated run); a saturated
                # dispatcher keeps the interval's pace (it would only park them again).
                more = self._has_room() and (
                    len(rows) >= s.sweep_batch
                    or max(Counter(r["endpoint_id"] for r in rows).values()) >= per_endpoint)
                reasons = Counter(r["reason"] for r in rows)
                for reason, n in reasons.items():
                    self._metrics.swept.labels(reason).inc(n)
                if lost := [r for r in rows if r["reason"] == "lost"]:
                    # Parked and released work is handed back by design; a lost task is not.
                    endpoints = sorted({str(r["endpoint_id"]) for r in lost})
                    log.warning("pending deliveries without a task re-queued", extra={
                        "count": len(lost), "endpoints": endpoints[:10]})
