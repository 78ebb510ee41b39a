"""Intake: tasks read from the deliveries topic → queued in the scheduler, or deferred.

A task is queued only if it can be served soon. Otherwise it leaves memory, durably,
before its offset may advance:

* ``not_due``: due later than the smallest tier (one due sooner is held on a timer until
  its exact due time, never attempted early) goes to the delay tier for its due time;
* ``circuit``: its endpoint's circuit is open — **parked** in PostgreSQL, due when the
  pause ends (spread over a few seconds so a reopening is not one burst);
* ``backlog``: beyond what its endpoint drains within the horizon
  (``hookstream.policy.backlog``) — **parked**, due when the endpoint's drain schedule
  reaches it. What stays in memory is the endpoint's *oldest* work, so a parked delivery
  handed back when its slot comes is served, not parked again behind younger ones.

Parked rows have no task anywhere; the sweeper (``lost_work``) hands each back to the
queue when its slot comes. A slow customer's backlog then costs one record per
delivery when released, instead of a deferral, its tier hops and its return — and
nothing of it pins the partition's commit point (issue #13).

Tasks of held endpoints (paused, disabled, deleted) are dropped: the rows stay pending
and the sweeper sends them once the endpoint is active again. An undecodable record goes
to the dead-letter topic; its offset completes only once that copy is acknowledged.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import random
import time
import uuid
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from datetime import UTC, datetime
from typing import Any, Protocol

from hookstream.dispatcher.endpoint_state import EndpointState, EndpointTable, Eviction
from hookstream.dispatcher.metrics import DispatcherMetrics
from hookstream.dispatcher.offset_book import Item, OffsetBook
from hookstream.dispatcher.store import Store

from hookstream.core.codec import CodecError, TaskKind
from hookstream.core.fastcodec import decode_task
from hookstream.core.offsets import PartitionOffsets
from hookstream.core.topics import Topics
from hookstream.io.kafka import Record
from hookstream.policy import backlog
from hookstream.policy.circuit import Admission, CircuitPolicy, admission
from hookstream.policy.scheduler import FairScheduler

log = logging.getLogger("hookstream.dispatcher")
# A task to defer: the item, its new due time (epoch s) and why (a metric label).
Deferral = tuple[Item, float, str]
# A circuit's deferrals are spread over this many seconds after the pause ends.
REOPEN_SPREAD_S = 5.0
# Deferrals parked in PostgreSQL (released by the sweeper) rather than sent to a tier.
PARKED = frozenset({"backlog", "circuit"})


def _age(item: Item) -> float:
    """Older deliveries first: when the work was committed (a parked one keeps its own)."""
    return item.task.committed_at.timestamp()


class Received(Protocol):
    """What intake reads of a consumed record (confluent-kafka's Message has it)."""

    def topic(self) -> str | None: ...
    def partition(self) -> int | None: ...
    def offset(self) -> int | None: ...
    def timestamp(self) -> tuple[int, int]: ...
    def key(self) -> bytes | None: ...
    def value(self) -> bytes | None: ...


class Intake:
    def __init__(self, *, topics: Topics, endpoints: EndpointTable,
                 sched: FairScheduler[uuid.UUID, Item], book: OffsetBook,
                 metrics: DispatcherMetrics, store: Store, policy: CircuitPolicy,
                 backlog_horizon_s: float,
                 publish: Callable[[list[Record]], Awaitable[bool]],
                 db: Callable[..., Awaitable[Any]], wake: Callable[[], None],
                 rng: random.Random | None = None):
        self._topics, self._endpoints, self._sched, self._book = topics, endpoints, sched, book
        self._metrics, self._store, self._policy = metrics, store, policy
        self._horizon_s = backlog_horizon_s
        self._publish, self._db, self._wake = publish, db, wake
        self._rng = rng or random.Random()
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
        if poison and await self._publish([r for r, _, _ in poison]):
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
        endpoints = self._endpoints
        reload = endpoints.to_reload({i.task.endpoint_id for i in items})
        if reload:
            for row in await self._db(self._store.load_endpoints, reload):
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
            elif (adm := admission(self._policy, ep.circuit, now)) is Admission.OPEN:
                assert ep.circuit.paused_until is not None
                deferred.append((item, self._reopening(ep.circuit.paused_until), "circuit"))
            else:
                endpoints.set_probing(ep, adm is Admission.PROBING)
                self._sched.push(ep.row.id, item, now_m)
                touched[ep.row.id] = ep
        for ep in touched.values():
            deferred.extend(self.overflow(ep, now))
        self._metrics.queued.set(self._sched.queued)
        if deferred:
            await self.defer(deferred)
        self._wake()

    def _due_now(self, item: Item) -> None:
        self._spawn(self.ingest([item]))

    def _reopening(self, paused_until: float) -> float:
        return paused_until + self._rng.uniform(0, REOPEN_SPREAD_S)

    def overflow(self, ep: EndpointState, now: float) -> list[Deferral]:
        """What an endpoint cannot drain within the horizon leaves memory for a delay tier,
        due when its bucket would reach it: memory stays flat whatever the backlog."""
        row = ep.row
        rate = backlog.drain_rate(row.rate_per_s, row.max_in_flight, ep.latency_s)
        keep = backlog.kept(row.max_in_flight, rate, self._horizon_s, ep.latency_s)
        # The youngest go: a delivery handed back from parking is older than the ones
        # that arrived meanwhile, and keeps its place.
        excess = self._sched.pop_excess(row.id, keep, age=_age)
        if not excess:
            return []
        plan = backlog.schedule(len(excess), kept=keep, rate_per_s=rate, now_s=now,
                                cursor_s=ep.defer_cursor)
        ep.defer_cursor, ep.planned_rate = plan.cursor_s, rate
        ep.deferred += len(excess)
        return [(item, due, "backlog") for item, due in zip(excess, plan.due_s, strict=True)]

    # -- after an attempt ----------------------------------------------------------------
    def trim(self, ep: EndpointState, now: float) -> None:
        """What it was given before its latency was known (or before it slowed down)
        leaves memory now, not when its next task happens to arrive; and if it sped up,
        what it parked comes back at its new pace."""
        if self._sched.queued_for(ep.row.id) > ep.row.max_in_flight:
            self.spawn_defer(self.overflow(ep, now))
        self._catch_up(ep, now)

    def _catch_up(self, ep: EndpointState, now: float) -> None:
        row = ep.row
        rate = backlog.drain_rate(row.rate_per_s, row.max_in_flight, ep.latency_s)
        factor = backlog.catch_up(ep.planned_rate, rate, ep.defer_cursor, now)
        if factor is None:
            return
        # The rows move first in memory too: new deferrals queue behind the compressed
        # schedule, not behind the old one. Whatever this process did not park (an earlier
        # incarnation's rows) moves with them: the query is per endpoint, not per process.
        ep.defer_cursor = backlog.compressed(ep.defer_cursor, now, factor)
        ep.planned_rate = rate
        self._metrics.caught_up.inc()
        self._spawn(self._pull_forward(row.id, now, factor))

    async def _pull_forward(self, endpoint_id: uuid.UUID, now: float, factor: float) -> None:
        await self._db(self._store.pull_forward, endpoint_id, now, factor)

    def evict(self, eviction: Eviction) -> None:
        """Queued tasks of an endpoint its circuit just paused (deferred until the pause
        ends) or disabled (dropped: the rows stay pending, sent after re-enabling)."""
        if eviction.until is None:
            for item in eviction.items:
                self._metrics.dropped.labels("disabled").inc()
                self._book.complete(item)
        elif eviction.items:
            until = eviction.until
            self.spawn_defer([(i, self._reopening(until), "circuit") for i in eviction.items])

    # -- deferring ---------------------------------------------------------------------------
    async def defer(self, deferred: list[Deferral]) -> None:
        parked = [d for d in deferred if d[2] in PARKED]
        tiered = [d for d in deferred if d[2] not in PARKED]
        if parked:
            await self._park(parked)
        if tiered:
            await self._to_tiers(tiered)

    async def _park(self, parked: list[Deferral]) -> None:
        tasks = [dataclasses.replace(item.task, due_at=datetime.fromtimestamp(due, UTC))
                 for item, due, _ in parked]
        # Durable once the rows say so: only then may the originals' offsets go.
        await self._db(self._store.park, tasks)
        for _, _, reason in parked:
            self._metrics.deferred.labels(reason).inc()
        self._book.complete_all([item for item, _, _ in parked])

    async def _to_tiers(self, deferred: list[Deferral]) -> None:
        now = time.time()
        records, tasks = [], []
        for item, due, reason in deferred:
            task = dataclasses.replace(item.task, due_at=datetime.fromtimestamp(due, UTC))
            tasks.append(task)
            records.append(Record(self._topics.for_delay(due - now), task.key, task.encode()))
            self._metrics.deferred.labels(reason).inc()
        # Only an acknowledged deferral lets the original's offset go; otherwise the
        # original is redelivered after a restart. The rows learn the new due time, so
        # the sweeper does not take a waiting delivery for a lost one.
        if await self._publish(records):
            await self._db(self._store.postpone, tasks)
            self._book.complete_all([item for item, _, _ in deferred])

    def spawn_defer(self, deferred: list[Deferral]) -> None:
        if deferred:
            self._spawn(self.defer(deferred))

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        job = asyncio.get_running_loop().create_task(coro)
        self._background.add(job)  # a task nobody references may be collected
        job.add_done_callback(self._background.discard)
