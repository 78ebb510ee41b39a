"""The dispatcher: delivery tasks → fair scheduling → claimed deliveries → signed POSTs →
durable outcomes, retries through the delay tiers.

One consumer polled from one worker thread (confluent-kafka is blocking); everything else
runs on one asyncio loop as a few named tasks:

* ``poll``: reads tasks, defers what cannot be served soon (paused endpoint, a backlog
  beyond what the endpoint drains in a few seconds) to a delay tier, queues the rest in
  the ``FairScheduler``;
* ``pump``: takes what the scheduler allows (endpoint and tenant caps and buckets, the
  process cap), claims it in one round trip, starts the attempts;
* ``writer``: per batch of finished attempts, makes retry/dead-letter records durable,
  then writes attempt rows, delivery rows and circuit states in one transaction, and
  only then lets the offsets advance;
* ``committer``, ``reaper``, ``refresher``: offsets, dead workers' leases, endpoint settings.

Messages complete out of order; a partition's offset is committed only up to its lowest
unfinished message.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import random
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypeVar

import aiohttp
from confluent_kafka import Consumer, Message, TopicPartition
from hookstream.dispatcher.attempt import AttemptResult, send
from hookstream.dispatcher.decide import circuit_after, delivery_verdict, is_throttle
from hookstream.dispatcher.delay import DelayForwarder
from hookstream.dispatcher.lost_work import LostWork
from hookstream.dispatcher.metrics import WORST_N, DispatcherMetrics
from hookstream.dispatcher.offset_book import Item, OffsetBook
from hookstream.dispatcher.outcomes import EndpointChanges, Finished, OutcomeWriter
from hookstream.dispatcher.store import AttemptRecord, Claim, EndpointRow, Store
from prometheus_client import CollectorRegistry

from hookstream.codec import CodecError, TaskKind
from hookstream.fastcodec import decode_task
from hookstream.kafka import (
    Failed,
    KafkaPermanent,
    KafkaTransient,
    Publisher,
    Record,
    consumer_config,
    publish_until_acked,
    translated,
    without_errors,
)
from hookstream.offsets import PartitionOffsets
from hookstream.pg import DatabaseUnavailable
from hookstream.policy import backlog
from hookstream.policy.backoff import BackoffPolicy
from hookstream.policy.circuit import Admission, CircuitPolicy, CircuitState, Verdict, admission
from hookstream.policy.classify import Outcome
from hookstream.policy.scheduler import FairScheduler, Limits
from hookstream.policy.token_bucket import AdaptiveRate
from hookstream.safe_resolver import SafeResolver
from hookstream.settings import DispatcherSettings
from hookstream.topics import Topics

log = logging.getLogger("hookstream.dispatcher")
T = TypeVar("T")
# Lanes and endpoint states unused this long are forgotten: memory stays bounded by the
# endpoints that are active, not by every endpoint ever seen.
IDLE_EVICT_S = 600.0
CLEAN_CIRCUIT = CircuitState()
# SIGTERM: in-flight attempts get their deadline (+5 s), then outcomes this long to be
# made durable; with the consumer's close this keeps shutdown under the 30 s bound that
# supervisors (and the test harness) give before SIGKILL.
SHUTDOWN_WRITE_WAIT_S = 10.0
# Deferrals in one refresh period with nothing served that mark an endpoint as stuck.
STUCK_DEFERRALS = 1000


@dataclass(slots=True)
class EndpointState:
    row: EndpointRow
    circuit: CircuitState
    adaptive: AdaptiveRate
    probing: bool = False
    last_used: float = 0.0
    # Backlog deferral: the next free slot of this endpoint's drain schedule (epoch s), so
    # every deferred task is due after the ones deferred before it and a task coming back
    # is not deferred again behind newer ones (the loop without progress of issue #12).
    defer_cursor: float = 0.0
    latency_s: float = 0.0  # moving average of its attempts: it drains at cap ÷ latency
    deferred: int = 0  # since the last refresh, for the no-progress check
    served: int = 0


class Dispatcher:
    def __init__(self, settings: DispatcherSettings, registry: CollectorRegistry):
        s = settings
        self.settings = s
        self.topics = Topics(s.topic_prefix)
        self.tiers = self.topics.tiers
        self.metrics = DispatcherMetrics(registry)
        self.metrics.publish_at_zero(
            [self.topics.deliveries.rsplit(".", 1)[-1],
             *(t.rsplit(".", 1)[-1] for t in self.tiers.topics)])
        self.registry = registry
        self.stop = threading.Event()
        self._healthy = False
        self._last_error: str | None = None
        self._delay: DelayForwarder | None = None
        self.backoff = BackoffPolicy(
            base_s=s.retry_base_s, cap_s=max(s.retry_cap_s, s.retry_base_s),
            floor_s=min(s.retry_floor_s, s.retry_base_s), jitter=min(s.retry_jitter, 1.0),
            window_s=s.retry_window_s, max_attempts=s.max_attempts)
        self.circuit_policy = CircuitPolicy(
            failure_threshold=s.circuit_failure_threshold, base_pause_s=s.circuit_base_pause_s,
            max_pause_s=max(s.circuit_max_pause_s, s.circuit_base_pause_s),
            disable_after_s=s.disable_after_s)
        self.rng = random.Random()
        tenant_limits = Limits(s.tenant_rate_per_s, s.tenant_burst, s.tenant_max_in_flight)
        self.sched: FairScheduler[uuid.UUID, Item] = FairScheduler(
            s.max_in_flight, lambda _tenant: tenant_limits)
        self._endpoints: dict[uuid.UUID, EndpointState] = {}
        self.book = OffsetBook()
        self._kafka = ThreadPoolExecutor(max_workers=1, thread_name_prefix="kafka")
        self._publisher = Publisher(s.kafka_bootstrap, "hookstream-dispatcher")
        # Set once shutdown has waited long enough: records not yet acknowledged then are
        # abandoned (their offsets stay uncommitted, so the work is redone after restart).
        self._abandon = threading.Event()
        self._store = Store(s.database_url, s.lease_s)  # opened in _main (no I/O here)
        self._attempts: set[asyncio.Task[None]] = set()
        self._background: set[asyncio.Task[None]] = set()
        self._dirty_circuits: dict[uuid.UUID, CircuitState] = {}
        self._disable: dict[uuid.UUID, str] = {}
        self._wake = asyncio.Event()
        self._room = asyncio.Event()
        self.writer = self._new_writer()

    # -- health: this process's own, and its delay forwarder's ---------------------------
    @property
    def healthy(self) -> bool:
        return self._healthy and (self._delay is None or self._delay.healthy)

    @healthy.setter
    def healthy(self, value: bool) -> None:
        self._healthy = value

    @property
    def last_error(self) -> str | None:
        if self._last_error is None and self._delay is not None and not self._delay.healthy:
            return self._delay.last_error
        return self._last_error

    @last_error.setter
    def last_error(self, value: str | None) -> None:
        self._last_error = value

    # -- Kafka, always from the one Kafka thread ----------------------------------------
    async def _k(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        return await asyncio.get_running_loop().run_in_executor(
            self._kafka, lambda: fn(*args, **kwargs))

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self.book.assigned((tp.topic, tp.partition) for tp in partitions)
        log.info("partitions assigned", extra={"partitions": [tp.partition for tp in partitions]})

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        # Commit what is finished. Queued work of these partitions is dropped when the pump
        # meets it (its tracker is gone); in-flight attempts finish and write their outcome
        # under their lease, and the next owner's claim of the redelivered task is stale.
        commits = self.book.revoked((tp.topic, tp.partition) for tp in partitions)
        if commits:
            try:
                with translated("commit on revoke"):
                    consumer.commit(offsets=[TopicPartition(t, p, o)
                                             for (t, p), o in commits.items()],
                                    asynchronous=False)
            except (KafkaTransient, KafkaPermanent) as exc:
                log.warning("commit on revoke failed", extra={"error": str(exc)})
        log.info("partitions revoked", extra={"partitions": [tp.partition for tp in partitions]})

    def _on_lost(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self.book.lost((tp.topic, tp.partition) for tp in partitions)
        log.warning("partitions lost", extra={"partitions": [tp.partition for tp in partitions]})

    def _subscribed(self) -> Consumer:
        s = self.settings
        consumer = Consumer(consumer_config(
            s.kafka_bootstrap, s.group_id, "hookstream-dispatcher",
            **{"fetch.wait.max.ms": 50}))
        with translated("subscribe"):
            consumer.subscribe([self.topics.deliveries], on_assign=self._on_assign,
                               on_revoke=self._on_revoke, on_lost=self._on_lost)
        self._consumer = consumer
        return consumer

    def _consume(self) -> list[Message]:
        """Records only; an error event is reported (transient) or raised (the consumer
        failed for good: KafkaPermanent)."""
        with translated("consume"):
            messages = self._consumer.consume(500, 0.1)
        good, error = without_errors(messages)
        if isinstance(error, KafkaPermanent):
            raise error
        if error is not None:
            self._fail("kafka", error)
        return good

    def _rebuild_consumer(self) -> None:
        log.warning("rebuilding the consumer", extra={"error": self.last_error})
        self._close_consumer()
        self._subscribed()

    def _close_consumer(self) -> None:
        try:
            with translated("close"):
                self._consumer.close()
        except (KafkaTransient, KafkaPermanent) as exc:
            log.warning("consumer close failed", extra={"error": str(exc)})

    def _commit_now(self) -> None:
        consumer = self._consumer
        commits = self.book.commits()
        if commits:
            with translated("commit"):
                consumer.commit(offsets=[TopicPartition(t, p, o)
                                         for (t, p), o in commits.items()], asynchronous=False)
            self.book.committed(commits)

    # -- the service ------------------------------------------------------------------
    def run(self) -> None:
        factory = None
        if self.settings.event_loop == "uvloop":
            import uvloop  # only where it is asked for: asyncio's loop needs nothing extra

            factory = uvloop.new_event_loop
        with asyncio.Runner(loop_factory=factory) as runner:
            runner.run(self._main())

    async def _main(self) -> None:
        s = self.settings
        self._wake = asyncio.Event()
        self._room = asyncio.Event()
        self.writer = self._new_writer()
        store = self._store
        await self._k(self._subscribed)
        delay = self._delay = DelayForwarder(
            s.kafka_bootstrap, f"{s.group_id}-delay", self.topics, self.tiers, self.registry,
            self.stop).start()
        lost = LostWork(store=store, settings=s, topic=self.topics.deliveries,
                        metrics=self.metrics, publish=self._publish, fail=self._fail,
                        writer_stuck_for=self.writer.stuck_for)
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
                asyncio.create_task(self._pump(store, session), name="pump"),
                asyncio.create_task(self.writer.run(), name="writer"),
                asyncio.create_task(self._commit_loop(), name="committer"),
                asyncio.create_task(lost.reap_forever(), name="reaper"),
                asyncio.create_task(lost.sweep_forever(), name="sweeper"),
                asyncio.create_task(self._refresh_loop(store), name="refresher"),
            ]
            for h in helpers:
                h.add_done_callback(self._helper_died)
            try:
                await self._poll_loop(store)
            finally:
                # Drain: in-flight attempts finish (bounded by their deadline), their
                # outcomes are written, then the final offsets are committed.
                helpers[0].cancel()
                if self._attempts:
                    await asyncio.wait(self._attempts, timeout=s.request_timeout_s + 5)
                if not await self.writer.drain(SHUTDOWN_WRITE_WAIT_S):
                    log.error("outcomes not written at shutdown; their tasks will be redelivered")
                # Whatever is still waiting for the broker or the database now is given up:
                # its offsets stay uncommitted, so the next owner redoes it.
                self._abandon.set()
                for h in helpers:
                    h.cancel()
                await asyncio.gather(*helpers, return_exceptions=True)
                try:
                    await self._k(self._commit_now)
                except (KafkaTransient, KafkaPermanent) as exc:
                    log.warning("final commit failed", extra={"error": str(exc)})
                await self._k(self._close_consumer)
                delay.join(5)
                await store.close()
                self._publisher.close(5)
                self._kafka.shutdown(wait=True)

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

    # -- poll: read, defer or queue ------------------------------------------------------
    async def _poll_loop(self, store: Store) -> None:
        s = self.settings
        while not self.stop.is_set():
            if self.sched.queued >= s.max_queued:
                # Back-pressure: read nothing more until the scheduler drains.
                self._room.clear()
                try:
                    await asyncio.wait_for(self._room.wait(), timeout=0.5)
                except TimeoutError:
                    pass
                continue
            try:
                messages = await self._k(self._consume)
            except KafkaPermanent as exc:
                # This consumer cannot go on (a fatal error): a new one resumes from the
                # committed offsets; what this one held in memory is redelivered.
                self._fail("kafka", exc)
                await self._k(self._rebuild_consumer)
                continue
            except KafkaTransient as exc:
                self._fail("kafka", exc)
                await asyncio.sleep(1)
                continue
            items: list[Item] = []
            poison: list[tuple[Record, PartitionOffsets, int]] = []
            trackers = self.book.track_all(((m.topic(), m.partition()) for m in messages),
                                           (m.offset() for m in messages))
            for msg, tracker in zip(messages, trackers, strict=True):
                assert tracker is not None
                try:
                    task = decode_task(msg.value() or b"")
                except CodecError as exc:
                    self.metrics.poison.inc()
                    poison.append((self._dead_letter_of(msg, str(exc)), tracker, msg.offset()))
                    continue
                items.append(Item(task, (msg.topic(), msg.partition()), msg.offset(), tracker))
            if poison and await self._publish([r for r, _, _ in poison]):
                # Its offset completes only once the dead-letter copy is acknowledged.
                self.book.complete_offsets((tracker, offset) for _, tracker, offset in poison)
            if items:
                await self._ingest(store, items)

    async def _ingest(self, store: Store, items: list[Item]) -> None:
        # Unknown endpoints, and held ones (paused or disabled: their tasks are dropped)
        # are read afresh, so a task produced after a resume never meets a stale "held".
        ids = {i.task.endpoint_id for i in items}
        reload = [k for k in ids if k not in self._endpoints
                  or self._endpoints[k].row.status != "active"]
        if reload:
            for row in await self._db(store.load_endpoints, reload):
                self._remember(row)
        now, now_m = time.time(), time.monotonic()
        deferred: list[tuple[Item, float, str]] = []
        touched: set[uuid.UUID] = set()
        for item in items:
            ep = self._endpoints.get(item.task.endpoint_id)
            if ep is None or ep.row.status != "active":
                # Held: the row stays pending (counted by reconcile and the gauges); when
                # the endpoint is active again the sweeper sends it at once (released_at).
                self.metrics.dropped.labels("endpoint_gone" if ep is None
                                            else ep.row.status).inc()
                self.book.complete(item)
                continue
            ep.last_used = now_m
            due = item.task.due_at.timestamp()
            if due > now + self.tiers.delays_s[0]:
                deferred.append((item, due, "not_due"))
            elif due > now:
                # Less than the smallest tier to go: held here until its exact due time
                # (never attempted early), then taken through the same checks again.
                asyncio.get_running_loop().call_later(due - now, self._due_now, store, item)
            elif (adm := admission(self.circuit_policy, ep.circuit, now)) is Admission.OPEN:
                assert ep.circuit.paused_until is not None
                # Spread the return over a few seconds so a reopening is not one burst.
                deferred.append((item, ep.circuit.paused_until + self.rng.uniform(0, 5), "circuit"))
            else:
                self._set_probing(ep, adm is Admission.PROBING)
                self.sched.push(ep.row.id, item, now_m)
                touched.add(ep.row.id)
        for endpoint_id in touched:
            deferred.extend(self._overflow(endpoint_id, now))
        self.metrics.queued.set(self.sched.queued)
        if deferred:
            await self._defer(deferred)
        self._wake.set()

    def _due_now(self, store: Store, item: Item) -> None:
        job = asyncio.get_running_loop().create_task(self._ingest(store, [item]))
        self._background.add(job)
        job.add_done_callback(self._background.discard)

    def _overflow(self, endpoint_id: uuid.UUID, now: float) -> list[tuple[Item, float, str]]:
        """What an endpoint cannot drain within the horizon leaves memory for a delay tier,
        due when its bucket would reach it: memory stays flat whatever the backlog."""
        ep = self._endpoints[endpoint_id]
        rate = backlog.drain_rate(ep.row.rate_per_s, ep.row.max_in_flight, ep.latency_s)
        keep = backlog.kept(ep.row.max_in_flight, rate, self.settings.backlog_horizon_s)
        excess = self.sched.pop_excess(endpoint_id, keep)
        if not excess:
            return []
        plan = backlog.schedule(len(excess), kept=keep, rate_per_s=rate, now_s=now,
                                cursor_s=ep.defer_cursor)
        ep.defer_cursor = plan.cursor_s
        ep.deferred += len(excess)
        return [(item, due, "backlog") for item, due in zip(excess, plan.due_s, strict=True)]

    async def _defer(self, deferred: list[tuple[Item, float, str]]) -> None:
        now = time.time()
        records, tasks = [], []
        for item, due, reason in deferred:
            task = dataclasses.replace(item.task, due_at=datetime.fromtimestamp(due, UTC))
            tasks.append(task)
            records.append(Record(self.topics.for_delay(due - now), task.key, task.encode()))
            self.metrics.deferred.labels(reason).inc()
        # Only an acknowledged deferral lets the original's offset go; otherwise the
        # original is redelivered after a restart. The rows learn the new due time, so
        # the sweeper does not take a waiting delivery for a lost one.
        if await self._publish(records):
            await self._db(self._store.postpone, tasks)
            self.book.complete_all([item for item, _, _ in deferred])

    # -- pump: take what the scheduler allows, claim, send ----------------------------------
    async def _pump(self, store: Store, session: aiohttp.ClientSession) -> None:
        while True:
            timer = self.sched.next_timer_at()
            timeout = 0.5 if timer is None else max(0.0, min(0.5, timer - time.monotonic()))
            try:
                await asyncio.wait_for(self._wake.wait(), timeout=timeout)
            except TimeoutError:
                pass
            self._wake.clear()
            while True:
                picked = [(k, i) for k, i in self.sched.take(time.monotonic(), 200)]
                if not picked:
                    break
                live = []
                for key, item in picked:
                    if self.book.valid(item):
                        live.append((key, item))
                    else:
                        self.sched.release(key, time.monotonic())  # revoked meanwhile
                if live:
                    await self._claim_and_send(store, session, live)
            self.metrics.queued.set(self.sched.queued)
            self.metrics.in_flight.set(len(self._attempts))
            if self.sched.queued < self.settings.max_queued:
                self._room.set()

    async def _claim_and_send(self, store: Store, session: aiohttp.ClientSession,
                              picked: list[tuple[uuid.UUID, Item]]) -> None:
        claims = await self._db(store.claim, [item.task for _, item in picked])
        by_id = {c.delivery_id: c for c in claims}
        now = datetime.now(UTC)
        for key, item in picked:
            claim = by_id.pop(item.task.delivery_id, None)
            if claim is None:
                self.metrics.stale.inc()
                self.sched.release(key, time.monotonic())
                self.book.complete(item)
                continue
            if item.task.kind is TaskKind.NEW and claim.attempt_no == 1:
                self.metrics.first_attempt.observe(
                    max(0.0, (now - item.task.committed_at).total_seconds()))
            job = asyncio.create_task(self._attempt(session, claim, item))
            self._attempts.add(job)
            job.add_done_callback(self._attempts.discard)

    async def _attempt(self, session: aiohttp.ClientSession, claim: Claim, item: Item) -> None:
        s = self.settings
        result = await send(
            session, url=claim.url, delivery_id=str(claim.delivery_id), body=claim.payload,
            secrets=claim.secrets, timeout_s=s.request_timeout_s,
            body_cap_bytes=s.response_body_cap_bytes, user_agent=s.user_agent,
            allow_private=s.allow_private_targets)
        self._observe(result)
        if claim.manual:
            self.metrics.replays.labels(result.decision.outcome.value).inc()
        now = time.time()
        verdict = delivery_verdict(
            result.decision, attempt_no=claim.attempt_no, manual=claim.manual,
            expires_at_s=claim.expires_at_s, now_s=now, policy=self.backoff, rng=self.rng)
        self._endpoint_feedback(claim.endpoint_id, result, now)
        self.sched.release(claim.endpoint_id, time.monotonic())
        self._wake.set()
        record = AttemptRecord(
            claim=claim, status=verdict.status.value, started_at=result.started_at,
            finished_at=result.finished_at, status_code=result.status_code,
            latency_ms=result.latency_ms,
            error_class=result.error_class.value if result.error_class else None,
            outcome=result.decision.outcome.value, excerpt=result.excerpt, error=result.error,
            next_at_s=verdict.retry_due_s)
        self.writer.add(Finished(record, verdict, item))

    def _endpoint_feedback(self, endpoint_id: uuid.UUID, result: AttemptResult,
                           now: float) -> None:
        """Circuit and adaptive rate: the endpoint's answer shapes what it gets next."""
        ep = self._endpoints.get(endpoint_id)
        if ep is None:
            return
        ep.served += 1
        ep.latency_s = backlog.smoothed_latency(ep.latency_s, result.latency_ms / 1000.0)
        if self.sched.queued_for(endpoint_id) > ep.row.max_in_flight:
            # What it was given before its latency was known (or before it slowed down)
            # leaves memory now, not when its next task happens to arrive.
            self._spawn_defer(self._overflow(endpoint_id, now))
        decision = result.decision
        if (decision.outcome is Outcome.DELIVERED and not ep.probing
                and ep.circuit == CLEAN_CIRCUIT
                and ep.adaptive.effective >= ep.adaptive.configured):
            return  # the common case: a healthy endpoint answered 2xx, nothing changes
        now_m = time.monotonic()
        if is_throttle(result.status_code):
            self.metrics.throttled.inc()
            self.sched.set_rate(endpoint_id, ep.adaptive.on_throttled(), now_m)
            if decision.retry_after_s:
                self.sched.hold(endpoint_id, now_m + min(decision.retry_after_s, 60.0))
        elif (decision.outcome is Outcome.DELIVERED
              and ep.adaptive.effective < ep.adaptive.configured):
            self.sched.set_rate(endpoint_id, ep.adaptive.on_success(), now_m)
        circuit, verdict = circuit_after(decision, result.status_code, ep.circuit,
                                         self.circuit_policy, now)
        if circuit != ep.circuit:
            ep.circuit = circuit
            self._dirty_circuits[endpoint_id] = circuit
        if decision.outcome is Outcome.DELIVERED and ep.probing:
            self._set_probing(ep, False)
            self.metrics.circuit.labels("closed").inc()
        if decision.outcome is Outcome.DISABLE:
            verdict = Verdict.DISABLE
        if verdict is Verdict.DISABLE:
            if decision.outcome is Outcome.DISABLE:
                reason = "the endpoint answered 410 Gone"
            else:
                since = datetime.fromtimestamp(circuit.first_failure_at or now, UTC)
                reason = f"failing continuously since {since:%Y-%m-%d %H:%M}Z"
            ep.row = dataclasses.replace(ep.row, status="disabled")
            self._disable[endpoint_id] = reason
            self.metrics.circuit.labels("disabled").inc()
            log.warning("endpoint disabled", extra={"endpoint": str(endpoint_id), "reason": reason})
        elif verdict is Verdict.PAUSE:
            assert circuit.paused_until is not None
            self.sched.hold(endpoint_id, now_m + (circuit.paused_until - now))
            self.metrics.circuit.labels("open").inc()
            log.warning("endpoint circuit opened", extra={
                "endpoint": str(endpoint_id), "failures": circuit.consecutive_failures,
                "paused_for_s": round(circuit.paused_until - now, 1)})
        if verdict is not Verdict.NONE:
            # Its queued tasks leave memory: deferred until the pause ends, or dropped
            # (rows stay pending, replayable after re-enabling) when disabled.
            queued = self.sched.pop_excess(endpoint_id, 0)
            if verdict is Verdict.DISABLE:
                for item in queued:
                    self.metrics.dropped.labels("disabled").inc()
                    self.book.complete(item)
            elif queued:
                until = circuit.paused_until or now
                self._spawn_defer([(i, until + self.rng.uniform(0, 5), "circuit")
                                   for i in queued])

    def _spawn_defer(self, deferred: list[tuple[Item, float, str]]) -> None:
        if not deferred:
            return
        job = asyncio.get_running_loop().create_task(self._defer(deferred))
        self._background.add(job)  # a task nobody references may be collected
        job.add_done_callback(self._background.discard)

    def _set_probing(self, ep: EndpointState, probing: bool) -> None:
        # After a pause only a probe's worth of traffic: one request at a time until one
        # succeeds, then the endpoint's own limits again.
        if ep.probing == probing:
            return
        ep.probing = probing
        cap = 1 if probing else ep.row.max_in_flight
        self.sched.set_endpoint(ep.row.id, ep.row.tenant,
                                Limits(ep.adaptive.effective, ep.row.burst, cap), time.monotonic())

    def _observe(self, result: AttemptResult) -> None:
        code = result.status_code
        status_class = f"{code // 100}xx" if code else (
            result.error_class.value if result.error_class else "none")
        self.metrics.attempts.inc(result.decision.outcome.value, status_class)
        self.metrics.latency.observe(result.latency_ms / 1000.0)

    # -- background loops ----------------------------------------------------------------
    async def _commit_loop(self) -> None:
        while True:
            await asyncio.sleep(0.5)
            try:
                await self._k(self._commit_now)
            except (KafkaTransient, KafkaPermanent) as exc:
                self._fail("kafka", exc)

    def _new_writer(self) -> OutcomeWriter:
        return OutcomeWriter(store=self._store, topics=self.topics, metrics=self.metrics,
                             book=self.book, publish=self._publish, db=self._db,
                             endpoint_changes=self._take_endpoint_changes)

    def _take_endpoint_changes(self) -> EndpointChanges:
        """Circuit states and disablements decided since the last batch, for the writer."""
        circuits, self._dirty_circuits = self._dirty_circuits, {}
        disable, self._disable = self._disable, {}
        return circuits, disable

    def _check_progress(self) -> None:
        """An endpoint whose tasks keep being deferred while none is served is a bug of
        this dispatcher, never a silent storm: counted and named."""
        stuck = 0
        for key, ep in self._endpoints.items():
            if ep.deferred >= STUCK_DEFERRALS and ep.served == 0:
                stuck += 1
                log.error("endpoint deferred without being served", extra={
                    "endpoint": str(key), "deferred": ep.deferred,
                    "queued": self.sched.queued_for(key)})
            ep.deferred = ep.served = 0
        self.metrics.stuck.set(stuck)

    async def _refresh_loop(self, store: Store) -> None:
        """Endpoint settings changed by their owners (rate, cap, pause, re-enable) reach
        the scheduler within a few seconds; unused state is forgotten."""
        while True:
            await asyncio.sleep(self.settings.endpoint_refresh_s)
            now_m = time.monotonic()
            self.sched.evict_idle(now_m, IDLE_EVICT_S)
            for key in [k for k, ep in self._endpoints.items()
                        if now_m - ep.last_used > IDLE_EVICT_S and not self.sched.has_endpoint(k)]:
                del self._endpoints[key]
            ids = list(self._endpoints)
            try:
                for i in range(0, len(ids), 1000):
                    for row in await store.load_endpoints(ids[i:i + 1000]):
                        self._remember(row)
            except DatabaseUnavailable as exc:
                self._fail("database", exc)
            self._export_worst()
            self._check_progress()

    def _remember(self, row: EndpointRow) -> None:
        ep = self._endpoints.get(row.id)
        if ep is None:
            ep = EndpointState(row=row, circuit=row.circuit, adaptive=AdaptiveRate(
                row.rate_per_s, max(row.rate_per_s / 16, 0.05)), last_used=time.monotonic())
            self._endpoints[row.id] = ep
        elif row != ep.row:
            if row.config_version != ep.row.config_version:
                # Changed by its owner or an operator (re-enabled, reset): their circuit wins.
                ep.circuit = row.circuit
            if row.rate_per_s != ep.row.rate_per_s:
                ep.adaptive = AdaptiveRate(row.rate_per_s, max(row.rate_per_s / 16, 0.05))
            ep.row = row
        cap = 1 if ep.probing else row.max_in_flight
        self.sched.set_endpoint(row.id, row.tenant,
                                Limits(ep.adaptive.effective, row.burst, cap), time.monotonic())

    def _export_worst(self) -> None:
        # Bounded cardinality: only the busiest few endpoints get a series.
        busiest = sorted(((self.sched.in_flight_for(k), k) for k in self._endpoints),
                         reverse=True)[:WORST_N]
        self.metrics.endpoint_in_flight.clear()
        for n, key in busiest:
            if n:
                self.metrics.endpoint_in_flight.labels(str(key)).set(n)

    # -- I/O helpers ----------------------------------------------------------------------
    async def _db(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Retry a database call until it succeeds: the offsets of the work it concerns stay
        uncommitted meanwhile, so even a crash here loses nothing."""
        delay = 0.2
        while True:
            try:
                result = await fn(*args)
                if not self.healthy:
                    self.healthy, self.last_error = True, None
                return result
            except DatabaseUnavailable as exc:
                self._fail("database", exc)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 10.0)

    async def _publish(self, records: list[Record]) -> bool:
        """True once every record is acknowledged by the broker (failed ones are sent
        again, exactly those); False only when shutdown gave up waiting."""
        return await publish_until_acked(
            self._publisher, records, on_failure=self._publish_failed,
            give_up=self._abandon.is_set)

    def _publish_failed(self, failed: list[Failed]) -> None:
        self.metrics.errors.labels("kafka_produce").inc(len(failed))
        self._fail("kafka", KafkaTransient(f"{len(failed)} records not acknowledged, "
                                           f"retrying them: {failed[0].error}"))
        for f in failed:
            if not f.retriable:  # a record the broker can never take: a bug, say so
                log.error("record refused permanently", extra={
                    "topic": f.record.topic, "error": f.error})

    def _dead_letter_of(self, msg: Message, reason: str) -> Record:
        log.error("undecodable task sent to the dead-letter topic",
                  extra={"reason": reason, "partition": msg.partition(), "offset": msg.offset()})
        return Record(self.topics.dead, msg.key() or b"", msg.value() or b"",
                      headers=[("hookstream-reason", reason.encode()[:500])])

    def _fail(self, kind: str, exc: BaseException) -> None:
        self.metrics.errors.labels(kind).inc()
        self.healthy, self.last_error = False, f"{kind}: {exc}"
        log.warning("dispatcher error", extra={"kind": kind, "error": str(exc)})
