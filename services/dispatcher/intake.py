"""Intake: tasks read from the deliveries topic → queued in the scheduler, or deferred.

A task is queued only if it can be served soon; otherwise the backlog (``backlog.py``)
takes it out of memory, durably, before its offset may advance: due later than the
smallest tier (``not_due``; one due sooner is held on a timer until its exact due time,
never attempted early), its endpoint's circuit open (``circuit``), or beyond what its
endpoint drains within the horizon (``backlog``, decided once the batch is queued).

Tasks of held endpoints (paused, disabled, deleted) are dropped: the rows stay pending
and the sweeper sends them once the endpoint is active again. An undecodable record goes
to the dead-letter topic; its offset completes only once that copy is acknowledged.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Callable, Coroutine, Sequence
from typing import Any, Protocol

from hookstream.dispatcher.backlog import Backlog, Deferral
from hookstream.dispatcher.boundary import Durable
from hookstream.dispatcher.endpoint_state import EndpointState, EndpointTable
from hookstream.dispatcher.metrics import DispatcherMetrics
from hookstream.dispatcher.offset_book import Item, OffsetBook

from hookstream.core.codec import CodecError, TaskKind
from hookstream.core.fastcodec import decode_task
from hookstream.core.offsets import PartitionOffsets
from hookstream.core.topics import Topics
from hookstream.io.kafka import Record
from hookstream.policy.circuit import Admission
from hookstream.policy.scheduler import FairScheduler

log = logging.getLogger("hookstream.dispatcher")


class Received(Protocol):
    """What intake reads of a consumed record (confluent-kafka's Message has it)."""

    def topic(self) -> str | None: ...
    def partition(self) -> int | None: ...
    def offset(self) -> int | None: ...
    def timestamp(self) -> tuple[int, int]: ...
    def key(self) -> bytes | None: ...
    def value(self) -> bytes | None: ...


class Intake:
    def __init__(self, *, endpoints: EndpointTable, sched: FairScheduler[uuid.UUID, Item],
                 backlog: Backlog, book: OffsetBook, durable: Durable, topics: Topics,
                 metrics: DispatcherMetrics, wake: Callable[[], None]):
        self._endpoints, self._sched, self._backlog = endpoints, sched, backlog
        self._book, self._durable, self._topics = book, durable, topics
        self._metrics, self._wake = metrics, wake
        self._smallest_tier_s = topics.tiers.delays_s[0]
        self._background: set[asyncio.Task[None]] = set()

    # -- records → items ---------------------------------------------------------------
    async def receive(self, messages: Sequence[Received]) -> None:
        """One consumed batch: decoded and ingested; undecodable records dead-lettered."""
        items: list[Item] = []
        poison: list[tuple[Record, PartitionOffsets, int]] = []
        trackers = self._book.track_all(((m.topic(), m.partition()) for m in messages),
                                        (m.offset() for m in messages))
        consumed_at = time.monotonic()
        read_at_ms = time.time() * 1000.0
        observe_read = self._metrics.stage_read.observe
        for msg, tracker in zip(messages, trackers, strict=True):
            assert tracker is not None
            tp, offset = (msg.topic(), msg.partition()), msg.offset()
            try:
                task = decode_task(msg.value() or b"")
            except CodecError as exc:
                assert offset is not None  # a consumed record always has one
                self._metrics.poison.inc()
                poison.append((self._dead_letter_of(msg, str(exc)), tracker, offset))
                continue
            items.append(Item(task, tp, offset, tracker, consumed_at))
            if task.kind is TaskKind.NEW:
                # The producer's clock is this host's in the benchmark; across hosts
                # it includes their skew (a Kafka CreateTime, milliseconds).
                observe_read(max(0.0, read_at_ms - msg.timestamp()[1]) / 1000.0)
        if poison and await self._durable.publish([r for r, _, _ in poison]):
            # Its offset completes only once the dead-letter copy is acknowledged.
            self._book.complete_offsets((tracker, offset) for _, tracker, offset in poison)
        if items:
            await self.ingest(items)

    def _dead_letter_of(self, msg: Received, reason: str) -> Record:
        log.error("undecodable task sent to the dead-letter topic",
                  extra={"reason": reason, "partition": msg.partition(), "offset": msg.offset()})
        return Record(self._topics.dead, msg.key() or b"", msg.value() or b"",
                      headers=[("hookstream-reason", reason.encode()[:500])])

    # -- items → scheduler or delay tier ---------------------------------------------------
    async def ingest(self, items: list[Item]) -> None:
        endpoints, backlog = self._endpoints, self._backlog
        reload = endpoints.to_reload({i.task.endpoint_id for i in items})
        if reload:
            for row in await self._durable.load_endpoints(reload):
                endpoints.remember(row)
        now, now_m = time.time(), time.monotonic()
        deferred: list[Deferral] = []
        touched: dict[uuid.UUID, EndpointState] = {}
        for item in items:
            ep = endpoints.get(item.task.endpoint_id)
            if ep is None or ep.row.status != "active":
                # Held: the row stays pending (counted by reconcile and the gauges); when
                # the endpoint is active again the sweeper sends it at once (released_at).
                # a deleted endpoint is gone too: its rows go with its delete operation
                gone = ep is None or ep.row.status == "deleted"
                self._metrics.dropped.labels("endpoint_gone" if gone
                                             else ep.row.status).inc()
                self._book.complete(item)
                continue
            ep.last_used = now_m
            due = item.task.due_at.timestamp()
            if due > now + self._smallest_tier_s:
                deferred.append((item, due, "not_due"))
            elif due > now:
                # Less than the smallest tier to go: held here until its exact due time
                # (never attempted early), then taken through the same checks again.
                asyncio.get_running_loop().call_later(due - now, self._due_now, item)
            elif endpoints.admit(ep, now) is Admission.OPEN:
                assert ep.circuit.paused_until is not None
                deferred.append((item, backlog.reopening(ep.circuit.paused_until), "circuit"))
            else:
                self._sched.push(ep.row.id, item, now_m)
                touched[ep.row.id] = ep
        for ep in touched.values():
            deferred.extend(backlog.overflow(ep, now))
        self._metrics.queued.set(self._sched.queued)
        if deferred:
            await backlog.defer(deferred)
        self._wake()

    def _due_now(self, item: Item) -> None:
        self._spawn(self.ingest([item]))

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        job = asyncio.get_running_loop().create_task(coro)
        self._background.add(job)  # a task nobody references may be collected
        job.add_done_callback(self._background.discard)
