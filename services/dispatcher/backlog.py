"""The backlog: what of an endpoint's work stays in memory, and how the rest leaves it.

A task leaves memory only durably, before its offset may advance (``defer``):

* ``not_due`` (from the intake): to the delay tier for its due time; the row learns the
  due time, so the sweeper does not take a waiting delivery for a lost one;
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

After each attempt the pump makes one call, ``after_attempt``: the endpoint table
learns the answer (latency, circuit, rate) and the backlog follows it — what the
endpoint no longer drains within the horizon leaves memory, a schedule parked at a
slower pace is pulled forward, and a pause or disablement empties its queue.
"""

from __future__ import annotations

import asyncio
import dataclasses
import random
import time
import uuid
from collections.abc import Coroutine
from datetime import UTC, datetime
from typing import Any

from hookstream.dispatcher.attempt import AttemptResult
from hookstream.dispatcher.boundary import Durable
from hookstream.dispatcher.endpoint_state import EndpointState, EndpointTable, Eviction
from hookstream.dispatcher.lost_work import requeued
from hookstream.dispatcher.metrics import DispatcherMetrics
from hookstream.dispatcher.offset_book import Item, OffsetBook

from hookstream.core.topics import Topics
from hookstream.io.kafka import Record
from hookstream.policy.backlog import catch_up, compressed, drain_rate, kept, schedule
from hookstream.policy.classify import Outcome
from hookstream.policy.scheduler import FairScheduler

# A task to defer: the item, its new due time (epoch s) and why (a metric label).
Deferral = tuple[Item, float, str]
# A circuit's deferrals are spread over this many seconds after the pause ends.
REOPEN_SPREAD_S = 5.0
# Deferrals parked in PostgreSQL (released by the sweeper) rather than sent to a tier.
PARKED = frozenset({"backlog", "circuit"})


def _age(item: Item) -> float:
    """Older deliveries first: when the work was committed (a parked one keeps its own)."""
    return item.task.committed_at.timestamp()


class Backlog:
    def __init__(self, *, sched: FairScheduler[uuid.UUID, Item], endpoints: EndpointTable,
                 book: OffsetBook, durable: Durable, topics: Topics,
                 metrics: DispatcherMetrics, horizon_s: float,
                 rng: random.Random | None = None):
        self._sched, self._endpoints, self._book = sched, endpoints, book
        self._durable, self._topics, self._metrics = durable, topics, metrics
        self._horizon_s = horizon_s
        self._rng = rng or random.Random()
        self._background: set[asyncio.Task[None]] = set()
        self._refilling: set[uuid.UUID] = set()

    # -- what stays in memory ------------------------------------------------------------
    def overflow(self, ep: EndpointState, now: float) -> list[Deferral]:
        """What an endpoint cannot drain within the horizon leaves memory for a delay tier,
        due when its bucket would reach it: memory stays flat whatever the backlog."""
        row = ep.row
        rate = drain_rate(row.rate_per_s, row.max_in_flight, ep.latency_s)
        keep = kept(row.max_in_flight, rate, self._horizon_s, ep.latency_s)
        # The youngest go: a delivery handed back from parking is older than the ones
        # that arrived meanwhile, and keeps its place.
        excess = self._sched.pop_excess(row.id, keep, age=_age)
        if not excess:
            return []
        plan = schedule(len(excess), kept=keep, rate_per_s=rate, now_s=now,
                        cursor_s=ep.defer_cursor)
        ep.defer_cursor, ep.planned_rate = plan.cursor_s, rate
        ep.deferred += len(excess)
        return [(item, due, "backlog") for item, due in zip(excess, plan.due_s, strict=True)]

    def reopening(self, paused_until: float) -> float:
        """When a task of an endpoint paused until then is due again."""
        return paused_until + self._rng.uniform(0, REOPEN_SPREAD_S)

    # -- after an attempt ----------------------------------------------------------------
    def after_attempt(self, endpoint_id: uuid.UUID, result: AttemptResult, now: float) -> None:
        """The answer reaches the endpoint table (latency, circuit, adaptive rate), and the
        endpoint's backlog follows it. Nothing happens for an endpoint forgotten meanwhile."""
        ep = self._endpoints.observed(endpoint_id, result.latency_ms)
        if ep is None:
            return
        self.trim(ep, now)
        eviction = self._endpoints.feedback(ep, result, now)
        if eviction is not None:
            self.evict(eviction)
        elif result.decision.outcome is Outcome.DELIVERED:
            self.refill(ep)

    def refill(self, ep: EndpointState) -> None:
        """An endpoint that just took a delivery and has nothing left in memory (this
        attempt its last in flight) gets the next of its parked rows now, however far
        ahead their slots were planned: a drain schedule is a ceiling, never a reason for
        a healthy endpoint to idle while its own work waits (issue #47 — a fresh process
        plans from no observations, an earlier one at a pace the endpoint has left).
        One refill at a time per endpoint; none once a refill found nothing, until this
        process parks for it again."""
        key = ep.row.id
        if (not ep.parked_maybe or key in self._refilling or ep.probing
                or self._sched.queued_for(key) or self._sched.in_flight_for(key) > 1):
            return
        self._refilling.add(key)
        self.spawn(self._refill(ep))

    async def _refill(self, ep: EndpointState) -> None:
        row = ep.row
        try:
            rate = drain_rate(row.rate_per_s, row.max_in_flight, ep.latency_s)
            rows = await self._durable.release_parked(
                row.id, kept(row.max_in_flight, rate, self._horizon_s, ep.latency_s))
            if not rows:
                ep.parked_maybe = False
                return
            # Not acknowledged (shutdown): the rows are due now with no task, so the
            # sweeper hands them back after its bound — a delay, never a loss.
            await self._durable.publish(requeued(self._topics.deliveries, rows,
                                                 datetime.now(UTC), swept=True,
                                                 origin=b"refill"))
            self._metrics.refilled.inc(len(rows))
        finally:
            self._refilling.discard(row.id)

    def trim(self, ep: EndpointState, now: float) -> None:
        """What it was given before its latency was known (or before it slowed down)
        leaves memory now, not when its next task happens to arrive; and if it sped up,
        what it parked comes back at its new pace."""
        if self._sched.queued_for(ep.row.id) > ep.row.max_in_flight:
            self._spawn_defer(self.overflow(ep, now))
        self._catch_up(ep, now)

    def _catch_up(self, ep: EndpointState, now: float) -> None:
        row = ep.row
        rate = drain_rate(row.rate_per_s, row.max_in_flight, ep.latency_s)
        factor = catch_up(ep.planned_rate, rate, ep.defer_cursor, now)
        if factor is None:
            return
        # The rows move first in memory too: new deferrals queue behind the compressed
        # schedule, not behind the old one. Whatever this process did not park (an earlier
        # incarnation's rows) moves with them: the query is per endpoint, not per process.
        ep.defer_cursor = compressed(ep.defer_cursor, now, factor)
        ep.planned_rate = rate
        self._metrics.caught_up.inc()
        self.spawn(self._pull_forward(row.id, now, factor))

    async def _pull_forward(self, endpoint_id: uuid.UUID, now: float, factor: float) -> None:
        await self._durable.pull_forward(endpoint_id, now, factor)

    def evict(self, eviction: Eviction) -> None:
        """Queued tasks of an endpoint its circuit just paused (deferred until the pause
        ends) or disabled (dropped: the rows stay pending, sent after re-enabling)."""
        if eviction.until is None:
            for item in eviction.items:
                self._metrics.dropped.labels("disabled").inc()
                self._book.complete(item)
        elif eviction.items:
            until = eviction.until
            self._spawn_defer([(i, self.reopening(until), "circuit") for i in eviction.items])

    # -- leaving memory, durably -----------------------------------------------------------
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
        written = await self._durable.park(tasks)
        for endpoint_id in {task.endpoint_id for task in tasks}:
            if (ep := self._endpoints.get(endpoint_id)) is not None:
                ep.parked_maybe = True
        for _, _, reason in parked:
            self._metrics.deferred.labels(reason).inc()
        missed = [item for item, _, _ in parked if item.task.delivery_id not in written]
        self._book.complete_all([item for item, _, _ in parked
                                 if item.task.delivery_id in written])
        if missed:
            await self.not_taken(missed)

    async def not_taken(self, items: list[Item]) -> None:
        """Tasks whose row took nothing from them (no claim, no parking): stale ones (a
        duplicate, a lease taken over) are dropped; an *early* one — its row still in
        flight at the task's own lease version, the attempt it follows not yet recorded —
        comes back through the smallest delay tier, by when the row is written. Dropped,
        its row would wait pending with no task for the sweeper's bound (issue #47)."""
        early = await self._durable.early([item.task for item in items])
        if early:
            back = time.time() + self._topics.tiers.delays_s[0]
            await self._to_tiers([(item, back, "early") for item in items
                                  if item.task.delivery_id in early])
        stale = [item for item in items if item.task.delivery_id not in early]
        self._metrics.stale.inc(len(stale))
        self._book.complete_all(stale)

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
        if await self._durable.publish(records):
            await self._durable.postpone(tasks)
            self._book.complete_all([item for item, _, _ in deferred])

    def _spawn_defer(self, deferred: list[Deferral]) -> None:
        if deferred:
            self.spawn(self.defer(deferred))

    def spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        job = asyncio.get_running_loop().create_task(coro)
        self._background.add(job)  # a task nobody references may be collected
        job.add_done_callback(self._background.discard)

