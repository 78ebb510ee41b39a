"""The delay-tier consumer: holds each record until its tier releases it, then hands it on.

Records of a tier partition become releasable in append order, so only the head ever
waits. The consumer keeps polling (it stays in its group and serves the other
partitions) and pauses a partition whose head is not due yet, holding what it already
fetched of that partition in a small bounded buffer; it resumes the partition shortly
before the head is due, so the next records are already fetched when it is. No
sleeping worker, no busy loop. (Seeking back to the head on every pause, as Spring
does, costs a re-fetch after each resume — measured here at 0.2–0.7 s with
librdkafka — which would make every release that late.)

A released record goes back to the deliveries topic when it is due (same key, so the
same dispatcher and token bucket), or hops to the tier that fits the time still to
wait. Offsets are committed only after the hand-on was acknowledged.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from dataclasses import dataclass

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from hookstream.codec import CodecError, DeliveryTask
from hookstream.kafka import consumer_config, flush_or_raise, new_producer
from hookstream.policy.tiers import Tiers
from hookstream.topics import Topics

log = logging.getLogger("hookstream.delay")
# Records held per partition at most; a partition is paused beyond it.
MAX_HELD = 1000
# A paused partition is resumed this long before its head is due, so what follows the
# head is fetched by then (a resume costs a fetch round, 0.2-0.7 s measured).
PREFETCH_S = 1.5


@dataclass(slots=True)
class Held:
    msg: Message
    task: DeliveryTask | None
    release_at: float


class DelayMetrics:
    def __init__(self, registry: CollectorRegistry):
        self.forwarded = Counter(
            "hookstream_delay_forwarded_total", "Records handed on by the delay tiers",
            ["tier", "to"], registry=registry)
        self.lateness = Histogram(
            "hookstream_delay_lateness_seconds",
            "How long after its due time a delayed record was handed back for delivery",
            buckets=(0.05, 0.1, 0.25, 0.5, 1, 1.5, 2, 3, 5, 10, 30, 60, 300),
            registry=registry)
        self.paused = Gauge(
            "hookstream_delay_partitions_waiting", "Tier partitions waiting on their head record",
            registry=registry)
        self.head_wait = Gauge(
            "hookstream_delay_oldest_due_seconds",
            "Seconds until the earliest waiting head record is released (0 when none waits)",
            registry=registry)
        self.errors = Counter(
            "hookstream_delay_errors_total", "Failures of the delay-tier consumer", ["kind"],
            registry=registry)


class DelayForwarder:
    def __init__(self, bootstrap: str, group_id: str, topics: Topics, tiers: Tiers,
                 registry: CollectorRegistry, stop: threading.Event):
        self.topics = topics
        self.tiers = tiers
        self.metrics = DelayMetrics(registry)
        self.stop = stop
        self.bootstrap = bootstrap
        self.group_id = group_id
        self.producer = new_producer(bootstrap, "hookstream-delay")
        self.healthy = True
        self._held: dict[tuple[str, int], deque[Held]] = {}
        self._paused: set[tuple[str, int]] = set()
        self._thread = threading.Thread(target=self._run, name="delay", daemon=True)

    def start(self) -> DelayForwarder:
        self._thread.start()
        return self

    def join(self, timeout: float) -> None:
        self._thread.join(timeout)

    def _run(self) -> None:
        consumer = Consumer(consumer_config(self.bootstrap, self.group_id, "hookstream-delay"))
        consumer.subscribe(self.tiers.topics, on_revoke=self._forget, on_lost=self._forget)
        try:
            while not self.stop.is_set():
                try:
                    self._round(consumer)
                    self.healthy = True
                except (KafkaException, RuntimeError) as exc:
                    self.healthy = False
                    self.metrics.errors.labels("kafka").inc()
                    log.warning("delay round failed", extra={"error": str(exc)})
                    self._rewind(consumer)
                    self.stop.wait(1.0)
        finally:
            consumer.close()
            self.producer.flush(10)

    def _forget(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        # Unacknowledged, uncommitted: the next owner reads these records again.
        for tp in partitions:
            self._held.pop((tp.topic, tp.partition), None)
            self._paused.discard((tp.topic, tp.partition))

    def _rewind(self, consumer: Consumer) -> None:
        # Nothing of the failed round was committed: read it again from the committed offsets.
        self._held.clear()
        try:
            assigned = consumer.assignment()
            if assigned:
                consumer.resume(assigned)
                self._paused.clear()
                for tp in consumer.committed(assigned, timeout=10):
                    if tp.offset >= 0:
                        consumer.seek(tp)
        except KafkaException as exc:
            log.warning("delay rewind failed", extra={"error": str(exc)})

    def _round(self, consumer: Consumer) -> None:
        commits = self._release(time.time())
        self._flow_control(consumer, time.time())
        heads = [buf[0].release_at for buf in self._held.values() if buf]
        timeout = 0.5
        if heads:
            timeout = max(0.005, min(timeout, min(heads) - time.time()))
        self.metrics.paused.set(len(self._paused))
        self.metrics.head_wait.set(max(0.0, min(heads) - time.time()) if heads else 0.0)
        for msg in consumer.consume(500, timeout=timeout):
            err = msg.error()
            if err is not None:
                if err.code() != KafkaError._PARTITION_EOF:
                    raise KafkaException(err)
                continue
            tp = (msg.topic(), msg.partition())
            self._held.setdefault(tp, deque()).append(self._hold(msg))
        commits.update(self._release(time.time()))
        if commits:
            flush_or_raise(self.producer, 30)
            consumer.commit(offsets=[TopicPartition(t, p, o) for (t, p), o in commits.items()],
                            asynchronous=False)

    def _hold(self, msg: Message) -> Held:
        _, ts_ms = msg.timestamp()
        release_at = ts_ms / 1000.0 + self.tiers.delay_of(msg.topic())
        try:
            task: DeliveryTask | None = DeliveryTask.decode(msg.value() or b"")
        except CodecError:
            task = None  # handed on (to the dead-letter topic) at once
        return Held(msg, task, release_at)

    def _release(self, now: float) -> dict[tuple[str, int], int]:
        commits: dict[tuple[str, int], int] = {}
        for tp, buf in self._held.items():
            while buf and buf[0].release_at <= now:
                held = buf.popleft()
                self._hand_on(held, now)
                commits[tp] = held.msg.offset() + 1
        return commits

    def _flow_control(self, consumer: Consumer, now: float) -> None:
        for tp, buf in self._held.items():
            wait = (buf[0].release_at - now) if buf else 0.0
            should_pause = len(buf) >= MAX_HELD or wait > PREFETCH_S
            if should_pause and tp not in self._paused:
                consumer.pause([TopicPartition(*tp)])
                self._paused.add(tp)
            elif not should_pause and tp in self._paused:
                consumer.resume([TopicPartition(*tp)])
                self._paused.discard(tp)

    def _hand_on(self, held: Held, now: float) -> None:
        msg, task = held.msg, held.task
        tier = msg.topic().rsplit(".", 1)[-1]
        if task is None:
            log.error("undecodable record in a delay tier; sent to the dead-letter topic",
                      extra={"topic": msg.topic(), "offset": msg.offset()})
            self.producer.produce(self.topics.dead, key=msg.key() or b"", value=msg.value(),
                                  headers=[("hookstream-reason", b"undecodable delay record")])
            self.metrics.forwarded.labels(tier, "dead").inc()
            return
        remaining = task.due_at.timestamp() - now
        # The last stretch, shorter than any tier, is waited out by the dispatcher, which
        # holds the task in memory until its exact due time: waiting here would make the
        # records behind this one wait for it (head of line) and bunch jittered retries
        # back into one burst; one more hop would add a whole tier.
        hop = None if remaining <= self.tiers.delays_s[0] else self.tiers.route(remaining)
        if hop is None:
            self.producer.produce(self.topics.deliveries, key=msg.key(), value=msg.value())
            self.metrics.lateness.observe(max(0.0, -remaining))
            self.metrics.forwarded.labels(tier, "deliveries").inc()
        else:
            self.producer.produce(self.tiers.topic(hop), key=msg.key(), value=msg.value())
            self.metrics.forwarded.labels(tier, "tier").inc()
