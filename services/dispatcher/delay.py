"""The delay-tier consumer: holds each record until its tier releases it, then hands it on.

It waits for a partition's head record by pausing that partition, seeking back to the
record and resuming it at the release time, while it keeps polling (so it stays in its
group and serves the other partitions): no sleeping worker, no busy loop. A released
record goes back to the deliveries topic when it is due (same key, so the same
dispatcher and token bucket), or hops to the tier that fits the time still to wait.
Offsets are committed only after the hand-on was acknowledged.
"""

from __future__ import annotations

import logging
import threading
import time
from datetime import UTC, datetime

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from hookstream.codec import CodecError, DeliveryTask
from hookstream.kafka import consumer_config, flush_or_raise, new_producer
from hookstream.policy.tiers import Tiers
from hookstream.topics import Topics

log = logging.getLogger("hookstream.delay")


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
        self._waiting: dict[tuple[str, int], float] = {}  # paused partition → release time
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
        for tp in partitions:
            self._waiting.pop((tp.topic, tp.partition), None)

    def _rewind(self, consumer: Consumer) -> None:
        # Nothing of the failed round was committed: read it again from the committed offsets.
        try:
            assigned = consumer.assignment()
            if assigned:
                for tp in consumer.committed(assigned, timeout=10):
                    if tp.offset >= 0:
                        consumer.seek(tp)
        except KafkaException as exc:
            log.warning("delay rewind failed", extra={"error": str(exc)})

    def _round(self, consumer: Consumer) -> None:
        now = time.time()
        for tp, at in list(self._waiting.items()):
            if at <= now:
                consumer.resume([TopicPartition(tp[0], tp[1])])
                del self._waiting[tp]
        timeout = 0.5
        if self._waiting:
            timeout = max(0.01, min(timeout, min(self._waiting.values()) - now))
        self.metrics.paused.set(len(self._waiting))
        self.metrics.head_wait.set(max(0.0, min(self._waiting.values()) - now)
                                   if self._waiting else 0.0)
        messages = consumer.consume(500, timeout=timeout)
        commits: dict[tuple[str, int], int] = {}
        now = time.time()
        for msg in messages:
            err = msg.error()
            if err is not None:
                if err.code() != KafkaError._PARTITION_EOF:
                    raise KafkaException(err)
                continue
            tp = (msg.topic(), msg.partition())
            if tp in self._waiting:
                continue  # fetched before the pause: it is read again after the resume
            release_at = self._release_time(msg)
            if release_at > now:
                consumer.pause([TopicPartition(*tp)])
                consumer.seek(TopicPartition(tp[0], tp[1], msg.offset()))
                self._waiting[tp] = release_at
                continue
            self._hand_on(msg, now)
            commits[tp] = msg.offset() + 1
        if commits:
            flush_or_raise(self.producer, 30)
            consumer.commit(offsets=[TopicPartition(t, p, o) for (t, p), o in commits.items()],
                            asynchronous=False)

    def _release_time(self, msg: Message) -> float:
        _, ts_ms = msg.timestamp()
        return ts_ms / 1000.0 + self.tiers.delay_of(msg.topic())

    def _hand_on(self, msg: Message, now: float) -> None:
        tier = msg.topic().rsplit(".", 1)[-1]
        try:
            task = DeliveryTask.decode(msg.value() or b"")
        except CodecError as exc:
            log.error("undecodable record in a delay tier; sent to the dead-letter topic",
                      extra={"topic": msg.topic(), "offset": msg.offset(), "error": str(exc)})
            self.producer.produce(self.topics.dead, key=msg.key() or b"", value=msg.value(),
                                  headers=[("hookstream-reason", str(exc).encode())])
            self.metrics.forwarded.labels(tier, "dead").inc()
            return
        remaining = (task.due_at - datetime.now(UTC)).total_seconds()
        hop = self.tiers.route(remaining)
        if hop is None:
            self.producer.produce(self.topics.deliveries, key=msg.key(), value=msg.value())
            self.metrics.lateness.observe(-remaining)
            self.metrics.forwarded.labels(tier, "deliveries").inc()
        else:
            self.producer.produce(self.tiers.topic(hop), key=msg.key(), value=msg.value())
            self.metrics.forwarded.labels(tier, "tier").inc()
