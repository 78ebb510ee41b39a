"""Finished attempts → durable outcomes, in batches.

Per batch: the retry and dead-letter records are made durable first (acknowledged by
the broker), then attempt rows, delivery rows, circuit states and disablements are
written in one transaction, and only then may the tasks' offsets advance. A row
PostgreSQL refuses is isolated (the batch halved until it is found) and written without
what the receiver sent, so one bad row never blocks the others.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

from hookstream.dispatcher.attempt import storable
from hookstream.dispatcher.boundary import Durable
from hookstream.dispatcher.decide import DeliveryVerdict
from hookstream.dispatcher.metrics import DispatcherMetrics
from hookstream.dispatcher.offset_book import Item, OffsetBook
from hookstream.dispatcher.store import AttemptRecord

from hookstream.core.aio import wait_set
from hookstream.core.codec import DeliveryTask, TaskKind
from hookstream.core.topics import Topics
from hookstream.io.kafka import Record
from hookstream.io.pg import DataRejected
from hookstream.policy.circuit import CircuitState

log = logging.getLogger("hookstream.dispatcher")
BATCH = 1000
EndpointChanges = tuple[dict[uuid.UUID, CircuitState], dict[uuid.UUID, str]]


@dataclass(slots=True)
class Finished:
    record: AttemptRecord
    verdict: DeliveryVerdict
    item: Item


class OutcomeWriter:
    def __init__(self, *, durable: Durable, topics: Topics, metrics: DispatcherMetrics,
                 book: OffsetBook, endpoint_changes: Callable[[], EndpointChanges]):
        self._durable, self._topics, self._metrics, self._book = durable, topics, metrics, book
        self._endpoint_changes = endpoint_changes
        # A plain list and an event: an asyncio.Queue costs several calls per item.
        self._finished: list[Finished] = []
        self._ready = asyncio.Event()
        self._all_written = asyncio.Event()
        self._all_written.set()
        self.unwritten = 0  # finished but not yet recorded (shutdown waits for 0)
        # When the oldest outcome of the batch being written finished (epoch s; None:
        # no batch in hand).
        self._batch_oldest_s: float | None = None

    def add(self, finished: Finished) -> None:
        self._finished.append(finished)
        self.unwritten += 1
        self._all_written.clear()
        self._ready.set()

    def stuck_for(self, now_s: float) -> float:
        """How long the oldest outcome not yet recorded has waited (0: none waits), for
        whatever it waits: its batch's retry records on the broker, or the database.
        Milliseconds when all is well; the reaper holds back while it is more, so a
        lease that expired meanwhile is not taken from an attempt that finished."""
        oldest = self._batch_oldest_s
        if oldest is None and self._finished:
            oldest = self._finished[0].record.finished_at
        return 0.0 if oldest is None else max(0.0, now_s - oldest)

    async def drain(self, timeout_s: float) -> bool:
        return await wait_set(self._all_written, timeout_s)

    async def run(self) -> None:
        while True:
            await self._ready.wait()
            await asyncio.sleep(0.005)  # let attempts finishing together join the batch
            batch, self._finished = self._finished[:BATCH], self._finished[BATCH:]
            self._batch_oldest_s = batch[0].record.finished_at if batch else None
            if not self._finished:
                self._ready.clear()
            # The records are durable before the rows say so; if they cannot be (shutdown
            # with Kafka gone), nothing is written and the tasks are redelivered: the
            # attempt rows stay open and the reaper closes them.
            records = self._records(batch, time.time())
            if not records or await self._durable.publish(records):
                circuits, disable = self._endpoint_changes()
                await self.record([f.record for f in batch], circuits, disable)
                self._book.complete_all([f.item for f in batch])
            self._batch_oldest_s = None
            self.unwritten -= len(batch)
            if not self.unwritten:
                self._all_written.set()

    def _records(self, batch: list[Finished], now: float) -> list[Record]:
        records = []
        for f in batch:
            task = f.item.task
            if f.verdict.retry_due_s is not None:
                retry = DeliveryTask(
                    delivery_id=task.delivery_id, event_id=task.event_id,
                    endpoint_id=task.endpoint_id, tenant=task.tenant, kind=TaskKind.RETRY,
                    due_at=datetime.fromtimestamp(f.verdict.retry_due_s, UTC),
                    committed_at=task.committed_at, lease_version=f.record.claim.lease_version)
                topic = self._topics.for_delay(f.verdict.retry_due_s - now)
                records.append(Record(topic, retry.key, retry.encode()))
                self._metrics.retries.labels(topic.rsplit(".", 1)[-1]).inc()
            elif f.verdict.dead_letter:
                records.append(Record(self._topics.dead, task.key, task.encode(), headers=[
                    ("hookstream-reason", (f.record.error or "dead").encode()[:500])]))
                self._metrics.dead.inc()
        return records

    async def record(self, records: list[AttemptRecord],
                     circuits: dict[uuid.UUID, CircuitState], disable: dict[uuid.UUID, str],
                     ) -> None:
        """Write outcomes, isolating any row PostgreSQL refuses."""
        try:
            applied = await self._durable.record(records, circuits, disable)
            if applied < len(records):
                # Written after the lease was taken over (a database outage longer than
                # the lease): the attempt row is complete, the delivery row belongs to
                # its newer attempt. Counted, never silent.
                self._metrics.late.inc(len(records) - applied)
                log.warning("outcomes arrived after their lease was taken over",
                            extra={"count": len(records) - applied})
            return
        except DataRejected as exc:
            if len(records) > 1:
                half = len(records) // 2
                await self.record(records[:half], circuits, disable)
                await self.record(records[half:], {}, {})
                return
            self._metrics.errors.labels("unstorable_outcome").inc()
            log.error("outcome refused by the database; recorded without the response",
                      extra={"delivery": str(records[0].claim.delivery_id) if records else None,
                             "error": str(exc)})
        for r in records:
            r.excerpt = None
            r.error = storable(f"response not storable: {r.error or ''}", 500)
        try:
            await self._durable.record(records, circuits, disable)
        except DataRejected as exc:  # not the receiver's bytes: a bug, loud but contained
            log.error("outcome cannot be recorded; its lease will expire and the reaper"
                      " closes the attempt", extra={"error": str(exc)})
