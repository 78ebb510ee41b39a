"""The dispatcher: delivery tasks → fair scheduling → claimed deliveries → signed POSTs →
durable outcomes, retries through the delay tiers.

This module wires the pieces and runs them as a few named asyncio tasks on one loop:

* ``poll`` (here): reads tasks from the ``DeliveryConsumer`` (``consumer.py``, one Kafka
  thread) and hands them to the ``Intake`` (``intake.py``), which queues in the
  ``FairScheduler`` what can be served soon and gives the rest to the ``Backlog``
  (``backlog.py``: paused endpoint, not yet due, more than the endpoint drains in a few
  seconds), which takes it out of memory durably (a delay tier, or parked in PostgreSQL);
* ``pump`` (``pump.py``): takes what the scheduler allows (endpoint and tenant caps and
  buckets, the process cap), claims it in one round trip, starts the attempts; each
  answer goes to the backlog (``after_attempt``: the ``EndpointTable``'s circuit and
  adaptive rate, and what they move out of memory), then to the outcome writer;
* ``writer`` (``outcomes.py``): per batch of finished attempts, makes retry/dead-letter
  records durable, then writes attempt rows, delivery rows and circuit states in one
  transaction, and only then lets the offsets advance (``offset_book.py``);
* ``committer``, ``reaper``/``sweeper`` (``lost_work.py``), ``refresher``: offsets, work
  no live task will run, endpoint settings.

Every database call and publish of the delivery path goes through one ``Durable``
(``boundary.py``): retried until it succeeds, failures reported to the ``Health``.

Messages complete out of order; a partition's offset is committed only up to its lowest
unfinished message.
"""

from __future__ import annotations

import asyncio
import logging
import random
import threading
import time
import uuid
from collections.abc import Callable

import aiohttp
from hookstream.dispatcher.backlog import Backlog
from hookstream.dispatcher.boundary import Durable, Health, until_acked
from hookstream.dispatcher.consumer import DeliveryConsumer
from hookstream.dispatcher.delay import DelayForwarder
from hookstream.dispatcher.endpoint_state import EndpointTable
from hookstream.dispatcher.intake import Intake
from hookstream.dispatcher.lost_work import LostWork
from hookstream.dispatcher.metrics import DispatcherMetrics
from hookstream.dispatcher.offset_book import Item, OffsetBook
from hookstream.dispatcher.outcomes import OutcomeWriter
from hookstream.dispatcher.pump import Pump
from hookstream.dispatcher.store import Store
from prometheus_client import CollectorRegistry

from hookstream.core.aio import wait_set
from hookstream.core.settings import DispatcherSettings
from hookstream.core.topics import Topics
from hookstream.io.kafka import KafkaPermanent, KafkaTransient, Publisher
from hookstream.io.safe_resolver import SafeResolver
from hookstream.ops.lag import LagSnapshot, oldest_waiting_s
from hookstream.ops.sampling import Sample
from hookstream.policy.backoff import BackoffPolicy
from hookstream.policy.circuit import CircuitPolicy
from hookstream.policy.scheduler import FairScheduler, Limits

log = logging.getLogger("hookstream.dispatcher")
# SIGTERM: in-flight attempts get their deadline (+5 s), then outcomes this long to be
# made durable; with the consumer's close this keeps shutdown under the 30 s bound that
# supervisors (and the test harness) give before SIGKILL.
SHUTDOWN_ATTEMPT_GRACE_S = 5.0
# A scheduler full for longer than this is not saturation but a stall (the database away):
# from then on the consumer is polled with its partitions paused (see _poll_loop).
HOLD_POLL_AFTER_S = 5.0
SHUTDOWN_WRITE_WAIT_S = 10.0


class Dispatcher:
    def __init__(self, settings: DispatcherSettings, registry: CollectorRegistry):
        s = settings
        self.settings = s
        self.topics = Topics(s.topic_prefix)
        self.metrics = DispatcherMetrics(registry)
        self.metrics.publish_at_zero(
            [self.topics.deliveries.rsplit(".", 1)[-1],
             *(t.rsplit(".", 1)[-1] for t in self.topics.tiers.topics)])
        self.registry = registry
        self.stop = threading.Event()
        # What the sweeper waits for: the group's unread tasks (its deliveries partitions,
        # its delay forwarder's tiers past their hold), from the lag sampler's snapshots.
        self._lag: Callable[[], Sample[LagSnapshot] | None] = lambda: None
        self._waits = {(s.group_id, self.topics.deliveries): 0.0, **{
            (f"{s.group_id}-delay", topic): hold for topic, hold in zip(
                self.topics.tiers.topics, self.topics.tiers.delays_s, strict=True)}}
        self.health = Health(self.metrics)
        backoff = BackoffPolicy(
            base_s=s.retry_base_s, cap_s=max(s.retry_cap_s, s.retry_base_s),
            floor_s=min(s.retry_floor_s, s.retry_base_s), jitter=min(s.retry_jitter, 1.0),
            window_s=s.retry_window_s, max_attempts=s.max_attempts)
        circuit = CircuitPolicy(
            failure_threshold=s.circuit_failure_threshold, base_pause_s=s.circuit_base_pause_s,
            max_pause_s=max(s.circuit_max_pause_s, s.circuit_base_pause_s),
            disable_after_s=s.disable_after_s)
        rng = random.Random()
        tenant_limits = Limits(s.tenant_rate_per_s, s.tenant_burst, s.tenant_max_in_flight)
        self.sched: FairScheduler[uuid.UUID, Item] = FairScheduler(
            s.max_in_flight, lambda _tenant: tenant_limits)
        self.book = OffsetBook()
        self._publisher = Publisher(s.kafka_bootstrap, "hookstream-dispatcher")
        # Set once shutdown has waited long enough: records not yet acknowledged then are
        # abandoned (their offsets stay uncommitted, so the work is redone after restart).
        self._abandon = threading.Event()
        self._store = Store(s.database_url, s.lease_s, keyring=s.secret_keys)  # opened in _main
        self.durable = Durable(
            self._store, until_acked(self._publisher, self.health, self._abandon.is_set),
            self.health)
        self.consumer = DeliveryConsumer(
            bootstrap=s.kafka_bootstrap, group_id=s.group_id, topic=self.topics.deliveries,
            book=self.book, fail=self.health.fail, membership=s.membership)
        self.endpoints = EndpointTable(sched=self.sched, policy=circuit, metrics=self.metrics,
                                       refresh_s=s.endpoint_refresh_s)
        # Built from the bottom of a delivery's path up: each part calls only the parts
        # built before it (intake → backlog, scheduler → pump → writer → offset book).
        self.writer = OutcomeWriter(
            durable=self.durable, topics=self.topics, metrics=self.metrics, book=self.book,
            endpoint_changes=self.endpoints.take_changes)
        self.backlog = Backlog(
            sched=self.sched, endpoints=self.endpoints, book=self.book, durable=self.durable,
            topics=self.topics, metrics=self.metrics, horizon_s=s.backlog_horizon_s, rng=rng)
        self.pump = Pump(
            settings=s, sched=self.sched, book=self.book, durable=self.durable,
            backlog=self.backlog, writer=self.writer, backoff=backoff, metrics=self.metrics,
            rng=rng)
        self.intake = Intake(
            endpoints=self.endpoints, sched=self.sched, backlog=self.backlog, book=self.book,
            durable=self.durable, topics=self.topics, metrics=self.metrics,
            wake=self.pump.wake)

    # -- health: this process's own, and its delay forwarder's (boundary.Health) -------------
    @property
    def healthy(self) -> bool:
        return self.health.healthy

    @healthy.setter
    def healthy(self, value: bool) -> None:
        self.health.healthy = value

    @property
    def last_error(self) -> str | None:
        return self.health.last_error

    @last_error.setter
    def last_error(self, value: str | None) -> None:
        self.health.last_error = value

    # -- the service ------------------------------------------------------------------
    def run(self) -> None:
        factory = None
        if self.settings.event_loop == "uvloop":
            import uvloop  # only where it is asked for: asyncio's loop needs nothing extra

            factory = uvloop.new_event_loop
        with asyncio.Runner(loop_factory=factory) as runner:
            runner.run(self._main())

    # -- what the sweeper must wait for (lost_work.lost_after_s) ---------------------------
    def watch_lag(self, latest: Callable[[], Sample[LagSnapshot] | None]) -> None:
        """The consumer-lag sampler this process runs anyway (runner.WatchesLag)."""
        self._lag = latest

    def tasks_waiting_s(self) -> float | None:
        """Age of the oldest task this group has not read yet (in the deliveries topic, or
        past its hold in a delay tier); None when unknown or the sample is stale."""
        sample = self._lag()
        now = time.time()
        if sample is None or now - sample.taken_at > 3 * self.settings.lag_sample_interval_s:
            return None
        return oldest_waiting_s(sample.value, self._waits, now)

    async def _main(self) -> None:
        s = self.settings
        store = self._store
        await self.consumer.subscribe()
        delay = self.health.delay = DelayForwarder(
            s.kafka_bootstrap, f"{s.group_id}-delay", self.topics, self.topics.tiers,
            self.registry, self.stop, s.membership).start()
        lost = LostWork(store=store, settings=s, topic=self.topics.deliveries,
                        metrics=self.metrics, publish=self.durable.publish,
                        fail=self.health.fail,
                        writer_stuck_for=self.writer.stuck_for,
                        # Back to back sweeps only while this process's scheduler is
                        # less than half full: a saturated dispatcher would park again
                        # what it was handed back (work, not progress).
                        has_room=lambda: self.sched.queued < s.max_queued // 2,
                        tasks_waiting_s=self.tasks_waiting_s)
        connector = aiohttp.TCPConnector(
            limit=s.max_in_flight, limit_per_host=0, ttl_dns_cache=10,
            resolver=SafeResolver(allow_private=s.allow_private_targets))
        # The per-attempt deadline is enforced by asyncio.timeout in send() (DNS, connect,
        # TLS, request, headers, capped body): aiohttp's own timeouts are switched off so a
        # request costs one timer, not two (timers were 7 % of the profile under load).
        # No proxy from the environment: the SSRF guard must see the real target's addresses.
        # No cookie jar: a cookie set by one tenant's endpoint must never be sent to another
        # endpoint on the same host (and filtering a growing jar would cost every request).
        # No decompression: the excerpt is the first bytes as sent, and a compressed bomb
        # costs nothing. Header lines beyond aiohttp's 8 KB limits fail the attempt.
        async with aiohttp.ClientSession(
                connector=connector, trust_env=False, cookie_jar=aiohttp.DummyCookieJar(),
                auto_decompress=False,
                timeout=aiohttp.ClientTimeout(total=None, connect=None, sock_read=None,
                                              sock_connect=None)) as session:
            await self._open_store(store)
            self.healthy = True
            helpers = [
                asyncio.create_task(self.pump.run(session), name="pump"),
                asyncio.create_task(self.writer.run(), name="writer"),
                asyncio.create_task(self.consumer.commit_forever(), name="committer"),
                asyncio.create_task(lost.reap_forever(), name="reaper"),
                asyncio.create_task(lost.sweep_forever(), name="sweeper"),
                asyncio.create_task(self.endpoints.refresh_forever(store, self.health.fail),
                                    name="refresher"),
            ]
            for h in helpers:
                h.add_done_callback(self._helper_died)
            try:
                await self._poll_loop()
            finally:
                await self._drain(helpers)
                delay.join(5)
                await store.close()
                self._publisher.close(5)

    async def _drain(self, helpers: list[asyncio.Task[None]]) -> None:
        """SIGTERM: in-flight attempts finish (bounded by their deadline), their outcomes
        are written, then the final offsets are committed."""
        helpers[0].cancel()  # the pump: nothing new starts
        attempts = self.pump.attempts
        if attempts:
            await asyncio.wait(attempts,
                               timeout=self.settings.request_timeout_s + SHUTDOWN_ATTEMPT_GRACE_S)
        if not await self.writer.drain(SHUTDOWN_WRITE_WAIT_S):
            log.error("outcomes not written at shutdown; their tasks will be redelivered")
        # Whatever is still waiting for the broker or the database now is given up:
        # its offsets stay uncommitted, so the next owner redoes it.
        self._abandon.set()
        for h in helpers:
            h.cancel()
        await asyncio.gather(*helpers, return_exceptions=True)
        await self.consumer.close()

    def _helper_died(self, task: asyncio.Task[None]) -> None:
        if not task.cancelled() and task.exception() is not None:
            # A dead helper would silently stall delivery: stop the service instead, so
            # the supervisor restarts it and the uncommitted work is redelivered.
            log.error("dispatcher task died; stopping", extra={"task": task.get_name()},
                      exc_info=task.exception())
            self.healthy, self.last_error = False, f"{task.get_name()} died"
            self.stop.set()

    async def _open_store(self, store: Store) -> None:
        while not self.stop.is_set():
            try:
                await store.open()
                return
            except Exception as exc:
                self.last_error = f"database: {exc}"
                log.warning("database not reachable yet", extra={"error": str(exc)})
                await asyncio.sleep(1)

    async def _poll_loop(self) -> None:
        max_queued, room = self.settings.max_queued, self.pump.room
        full_since: float | None = None
        while not self.stop.is_set():
            held = False
            if self.sched.queued >= max_queued:
                # Back-pressure: no more records until the scheduler drains. A brief
                # hold (the normal state at saturation) just waits; a long one (the
                # database away, claims failing) polls the consumer with its partitions
                # paused, so the group's rebalances go on and the member is not dropped
                # for max.poll.interval.ms.
                full_since = full_since or time.monotonic()
                room.clear()
                await wait_set(room, 0.5)
                held = self.sched.queued >= max_queued
                if held and time.monotonic() - full_since < HOLD_POLL_AFTER_S:
                    continue
            else:
                full_since = None
            try:
                messages = await self.consumer.consume(held)
            except KafkaPermanent as exc:
                # This consumer cannot go on (a fatal error): a new one resumes from the
                # committed offsets; what this one held in memory is redelivered.
                self.health.fail("kafka", exc)
                await self.consumer.rebuild(self.last_error)
                continue
            except KafkaTransient as exc:
                self.health.fail("kafka", exc)
                await asyncio.sleep(1)
                continue
            await self.intake.receive(messages)
