"""The dispatcher: delivery tasks → claimed deliveries → signed POSTs → durable outcomes.

One consumer polled from one worker thread (confluent-kafka is blocking); everything
else runs on one asyncio loop. Messages complete out of order; a partition's offset
is committed only up to its lowest unfinished message, and only after the outcome
row is written.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any, TypeVar

import aiohttp
import psycopg
from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from hookstream.codec import CodecError, DeliveryTask, TaskKind
from hookstream.dispatcher.attempt import AttemptResult, send
from hookstream.dispatcher.store import ROW_STATUS, AttemptRecord, Claim, Store
from hookstream.kafka import consumer_config, new_producer
from hookstream.offsets import PartitionOffsets
from hookstream.policy.classify import Outcome
from hookstream.safe_resolver import SafeResolver
from hookstream.settings import DispatcherSettings
from hookstream.topics import Topics

log = logging.getLogger("hookstream.dispatcher")
T = TypeVar("T")
TP = tuple[str, int]


class DispatcherMetrics:
    def __init__(self, registry: CollectorRegistry):
        self.attempts = Counter(
            "hookstream_dispatcher_attempts_total", "HTTP attempts by outcome and status class",
            ["outcome", "status_class"], registry=registry)
        self.latency = Histogram(
            "hookstream_dispatcher_attempt_seconds", "Duration of one HTTP attempt",
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
            registry=registry)
        self.first_attempt = Histogram(
            "hookstream_first_attempt_latency_seconds",
            "Outbox commit → start of a delivery's first attempt",
            buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 1800),
            registry=registry)
        self.in_flight = Gauge(
            "hookstream_dispatcher_in_flight", "Attempts in flight in this process",
            registry=registry)
        self.stale = Counter(
            "hookstream_dispatcher_stale_tasks_total",
            "Duplicate or stale tasks dropped (their delivery was not claimable)",
            registry=registry)
        self.poison = Counter(
            "hookstream_dispatcher_undecodable_tasks_total",
            "Task records that could not be decoded (sent to the dead-letter topic)",
            registry=registry)
        self.reaped = Counter(
            "hookstream_dispatcher_leases_reaped_total",
            "Deliveries handed back after their worker died mid-attempt", registry=registry)
        self.errors = Counter(
            "hookstream_dispatcher_errors_total", "Failures of the dispatcher's own machinery",
            ["kind"], registry=registry)


class Dispatcher:
    def __init__(self, settings: DispatcherSettings, registry: CollectorRegistry):
        self.settings = settings
        self.topics = Topics(settings.topic_prefix)
        self.metrics = DispatcherMetrics(registry)
        self.stop = threading.Event()
        self.healthy = False
        self.last_error: str | None = None
        # Offsets are read by the rebalance callbacks on the Kafka thread: guard them.
        self._offsets: dict[TP, PartitionOffsets] = {}
        self._offsets_lock = threading.Lock()
        self._committed: dict[TP, int] = {}
        self._kafka = ThreadPoolExecutor(max_workers=1, thread_name_prefix="kafka")
        self._producer = new_producer(settings.kafka_bootstrap, "hookstream-dispatcher")
        self._in_flight: set[asyncio.Task[None]] = set()

    # -- Kafka, always from the one Kafka thread ----------------------------------------
    async def _k(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        return await asyncio.get_running_loop().run_in_executor(
            self._kafka, lambda: fn(*args, **kwargs))

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        with self._offsets_lock:
            for tp in partitions:
                self._offsets[(tp.topic, tp.partition)] = PartitionOffsets()
        log.info("partitions assigned", extra={"partitions": [tp.partition for tp in partitions]})

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        # Commit what is finished; unfinished work of these partitions is redelivered to
        # their next owner, whose claim finds it in flight under our lease and skips it
        # (our outcome, written when it lands, decides), or reclaims it once the lease
        # expired if we die.
        commits = []
        with self._offsets_lock:
            for tp in partitions:
                tracker = self._offsets.pop((tp.topic, tp.partition), None)
                offset = tracker.committable() if tracker else None
                if offset is not None and offset != self._committed.get((tp.topic, tp.partition)):
                    commits.append(TopicPartition(tp.topic, tp.partition, offset))
                self._committed.pop((tp.topic, tp.partition), None)
        if commits:
            try:
                consumer.commit(offsets=commits, asynchronous=False)
            except KafkaException as exc:
                log.warning("commit on revoke failed", extra={"error": str(exc)})
        log.info("partitions revoked", extra={"partitions": [tp.partition for tp in partitions]})

    def _on_lost(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        # Someone else may own them already: commit nothing.
        with self._offsets_lock:
            for tp in partitions:
                self._offsets.pop((tp.topic, tp.partition), None)
                self._committed.pop((tp.topic, tp.partition), None)
        log.warning("partitions lost", extra={"partitions": [tp.partition for tp in partitions]})

    def _track(self, msg: Message) -> None:
        with self._offsets_lock:
            tracker = self._offsets.setdefault((msg.topic(), msg.partition()), PartitionOffsets())
            tracker.track(msg.offset())

    def _complete(self, tp: TP, offset: int) -> None:
        with self._offsets_lock:
            tracker = self._offsets.get(tp)
            if tracker is not None:  # None: revoked meanwhile, the next owner redoes it
                try:
                    tracker.complete(offset)
                except ValueError:
                    pass  # a tracker replaced by a reassignment

    def _commit_now(self, consumer: Consumer) -> None:
        with self._offsets_lock:
            commits = []
            for tp, tracker in self._offsets.items():
                offset = tracker.committable()
                if offset is not None and offset != self._committed.get(tp):
                    commits.append(TopicPartition(tp[0], tp[1], offset))
        if commits:
            consumer.commit(offsets=commits, asynchronous=False)
            with self._offsets_lock:
                for c in commits:
                    self._committed[(c.topic, c.partition)] = c.offset

    # -- the service ------------------------------------------------------------------
    def run(self) -> None:
        asyncio.run(self._main())

    async def _main(self) -> None:
        s = self.settings
        store = Store(s.database_url, s.lease_s)
        consumer = Consumer(consumer_config(
            s.kafka_bootstrap, s.group_id, "hookstream-dispatcher",
            **{"fetch.wait.max.ms": 50}))
        await self._k(consumer.subscribe, [self.topics.deliveries], on_assign=self._on_assign,
                      on_revoke=self._on_revoke, on_lost=self._on_lost)
        connector = aiohttp.TCPConnector(
            limit=s.max_in_flight, limit_per_host=0, ttl_dns_cache=10,
            resolver=SafeResolver(allow_private=s.allow_private_targets))
        outcomes: asyncio.Queue[tuple[AttemptRecord, TP, int]] = asyncio.Queue()
        async with aiohttp.ClientSession(connector=connector) as session:
            await self._open_store(store)
            self.healthy = True
            writer = asyncio.create_task(self._write_outcomes(store, outcomes), name="writer")
            committer = asyncio.create_task(self._commit_loop(consumer), name="committer")
            reaper = asyncio.create_task(self._reap_loop(store), name="reaper")
            try:
                await self._poll_loop(consumer, store, session, outcomes)
            finally:
                # Drain: in-flight attempts finish (bounded by their deadline), their
                # outcomes are written, then the final offsets are committed.
                if self._in_flight:
                    await asyncio.wait(self._in_flight, timeout=s.request_timeout_s + 5)
                await outcomes.join()
                for task in (writer, committer, reaper):
                    task.cancel()
                await asyncio.gather(writer, committer, reaper, return_exceptions=True)
                try:
                    await self._k(self._commit_now, consumer)
                except KafkaException as exc:
                    log.warning("final commit failed", extra={"error": str(exc)})
                await self._k(consumer.close)
                await store.close()
                self._producer.flush(10)
                self._kafka.shutdown(wait=True)

    async def _open_store(self, store: Store) -> None:
        while not self.stop.is_set():
            try:
                await store.open()
                return
            except Exception as exc:
                self.last_error = f"database: {exc}"
                log.warning("database not reachable yet", extra={"error": str(exc)})
                await asyncio.sleep(1)

    async def _poll_loop(self, consumer: Consumer, store: Store, session: aiohttp.ClientSession,
                         outcomes: asyncio.Queue[tuple[AttemptRecord, TP, int]]) -> None:
        s = self.settings
        while not self.stop.is_set():
            free = s.max_in_flight - len(self._in_flight)
            if free <= 0:
                # Back-pressure: wait for a slot instead of reading more than we can hold.
                await asyncio.wait(self._in_flight, return_when=asyncio.FIRST_COMPLETED)
                continue
            try:
                messages: list[Message] = await self._k(consumer.consume, min(free, 500), 0.1)
            except KafkaException as exc:
                self._fail("kafka", exc)
                await asyncio.sleep(1)
                continue
            tasks: list[tuple[DeliveryTask, TP, int]] = []
            for msg in messages:
                err = msg.error()
                if err is not None:
                    if err.code() != KafkaError._PARTITION_EOF:
                        self._fail("kafka", KafkaException(err))
                    continue
                self._track(msg)
                tp, offset = (msg.topic(), msg.partition()), msg.offset()
                try:
                    tasks.append((DeliveryTask.decode(msg.value() or b""), tp, offset))
                except CodecError as exc:
                    self.metrics.poison.inc()
                    self._to_dead_letter(msg, str(exc))
                    self._complete(tp, offset)
            if not tasks:
                continue
            claims = await self._claim_with_retry(store, [t for t, _, _ in tasks])
            by_id = {c.delivery_id: c for c in claims}
            for task, tp, offset in tasks:
                claim = by_id.pop(task.delivery_id, None)
                if claim is None:
                    self.metrics.stale.inc()
                    self._complete(tp, offset)
                    continue
                if task.kind is TaskKind.NEW and claim.attempt_no == 1:
                    self.metrics.first_attempt.observe(
                        max(0.0, (datetime.now(UTC) - task.committed_at).total_seconds()))
                job = asyncio.create_task(self._attempt(session, claim, tp, offset, outcomes))
                self._in_flight.add(job)
                job.add_done_callback(self._in_flight.discard)
            self.metrics.in_flight.set(len(self._in_flight))

    async def _claim_with_retry(self, store: Store, tasks: list[DeliveryTask]) -> list[Claim]:
        # The tasks' offsets stay uncommitted while the database is away: nothing is lost,
        # the poll loop simply does not move on.
        delay = 0.5
        while True:
            try:
                claims = await store.claim(tasks)
                self.healthy, self.last_error = True, None
                return claims
            except (psycopg.Error, OSError) as exc:
                self._fail("database", exc)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 10.0)

    async def _attempt(self, session: aiohttp.ClientSession, claim: Claim, tp: TP, offset: int,
                       outcomes: asyncio.Queue[tuple[AttemptRecord, TP, int]]) -> None:
        s = self.settings
        result = await send(
            session, url=claim.url, delivery_id=str(claim.delivery_id), body=claim.payload,
            secrets=claim.secrets, timeout_s=s.request_timeout_s,
            body_cap_bytes=s.response_body_cap_bytes, user_agent=s.user_agent)
        self._observe(result)
        outcome = result.decision.outcome
        await outcomes.put((AttemptRecord(
            claim=claim, status=ROW_STATUS[outcome], started_at=result.started_at,
            finished_at=result.finished_at, status_code=result.status_code,
            latency_ms=result.latency_ms,
            error_class=result.error_class.value if result.error_class else None,
            outcome=outcome.value, excerpt=result.excerpt, error=result.error,
            disable_endpoint=outcome is Outcome.DISABLE), tp, offset))

    def _observe(self, result: AttemptResult) -> None:
        code = result.status_code
        status_class = f"{code // 100}xx" if code else (
            result.error_class.value if result.error_class else "none")
        self.metrics.attempts.labels(result.decision.outcome.value, status_class).inc()
        self.metrics.latency.observe(result.latency_ms / 1000.0)

    async def _write_outcomes(self, store: Store,
                              queue: asyncio.Queue[tuple[AttemptRecord, TP, int]]) -> None:
        """Batch outcome rows: one transaction for everything that finished meanwhile."""
        while True:
            batch = [await queue.get()]
            await asyncio.sleep(0.005)  # let the attempts finishing together join the batch
            while not queue.empty() and len(batch) < 1000:
                batch.append(queue.get_nowait())
            delay = 0.2
            while True:
                try:
                    await store.record([r for r, _, _ in batch])
                    break
                except (psycopg.Error, OSError) as exc:
                    # Keep the outcomes and try again: the offsets stay uncommitted, so
                    # even a crash here only leads to a redelivered (stale) task.
                    self._fail("database", exc)
                    await asyncio.sleep(delay)
                    delay = min(delay * 2, 10.0)
            for _, tp, offset in batch:
                self._complete(tp, offset)
                queue.task_done()

    async def _commit_loop(self, consumer: Consumer) -> None:
        while True:
            await asyncio.sleep(0.5)
            try:
                await self._k(self._commit_now, consumer)
            except KafkaException as exc:
                self._fail("kafka", exc)

    async def _reap_loop(self, store: Store) -> None:
        async def produce(rows: list[dict[str, Any]]) -> None:
            now = datetime.now(UTC)
            for r in rows:
                task = DeliveryTask(
                    delivery_id=r["delivery_id"], event_id=r["event_id"],
                    endpoint_id=r["endpoint_id"], tenant=r["tenant"], kind=TaskKind.RETRY,
                    due_at=now, committed_at=now, lease_version=r["lease_version"])
                self._producer.produce(self.topics.deliveries, key=task.key, value=task.encode())
            remaining = await asyncio.to_thread(self._producer.flush, 30)
            if remaining:
                raise RuntimeError(f"{remaining} reaped tasks not acknowledged")

        while True:
            await asyncio.sleep(min(5.0, self.settings.lease_s / 2))
            try:
                n = await store.expired_leases(500, produce)
                if n:
                    self.metrics.reaped.inc(n)
                    log.warning("expired leases handed back", extra={"count": n})
            except Exception as exc:
                self._fail("reaper", exc)

    def _to_dead_letter(self, msg: Message, reason: str) -> None:
        log.error("undecodable task sent to the dead-letter topic",
                  extra={"reason": reason, "partition": msg.partition(), "offset": msg.offset()})
        self._producer.produce(self.topics.dead, key=msg.key() or b"", value=msg.value() or b"",
                               headers=[("hookstream-reason", reason.encode())])
        self._producer.poll(0)

    def _fail(self, kind: str, exc: BaseException) -> None:
        self.metrics.errors.labels(kind).inc()
        self.healthy, self.last_error = False, f"{kind}: {exc}"
        log.warning("dispatcher error", extra={"kind": kind, "error": str(exc)})
