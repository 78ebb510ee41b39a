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
wait. A partition's offset is committed only after every record handed on up to it was
acknowledged (its own delivery report; the failed ones are published again). A failed
round (broker away, a commit refused) is read again from the first uncommitted record;
the consumer is rebuilt when it cannot seek. Nothing here makes the thread exit on an
outage; if it dies of a bug it stops the dispatcher, so nothing is stranded silently.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import cast

from confluent_kafka import Message
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from hookstream.core.codec import CodecError, DeliveryTask
from hookstream.core.group import DEFAULT_MEMBERSHIP, Membership
from hookstream.core.topics import Topics
from hookstream.io.kafka import (
    TP,
    Failed,
    GroupConsumer,
    KafkaPermanent,
    KafkaTransient,
    Publisher,
    Record,
    consumer_config,
    publish_until_acked_sync,
)
from hookstream.policy.tiers import Tiers

log = logging.getLogger("hookstream.delay")
# Records held per partition at most; a partition is paused beyond it.
MAX_HELD = 1000
# A paused partition is resumed this long before its head is due, so what follows the
# head is fetched by then (a resume costs a fetch round, 0.2-0.7 s measured).
PREFETCH_S = 1.5
MAX_BACKOFF_S = 5.0


@dataclass(slots=True)
class Held:
    msg: Message
    task: DeliveryTask | None
    release_at: float


@dataclass(slots=True)
class HandOn:
    """A released record on its way: where it goes, and what to count once acknowledged."""

    record: Record
    tier: str
    to: str
    late_s: float | None


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
        self.healthy = Gauge(
            "hookstream_delay_healthy",
            "1 while the delay-tier consumer runs and forwards, 0 while it cannot (broker "
            "away, records not acknowledged) or has died", registry=registry)


class DelayForwarder:
    def __init__(self, bootstrap: str, group_id: str, topics: Topics, tiers: Tiers,
                 registry: CollectorRegistry, stop: threading.Event,
                 membership: Membership = DEFAULT_MEMBERSHIP):
        self.topics = topics
        self.tiers = tiers
        self.metrics = DelayMetrics(registry)
        self.metrics.healthy.set_function(lambda: 1.0 if self.healthy else 0.0)
        self.stop = stop
        self.bootstrap = bootstrap
        self.group_id = group_id
        self.membership = membership
        self.publisher = Publisher(bootstrap, "hookstream-delay")
        self.consumer: GroupConsumer | None = None
        self.last_error: str | None = None
        self._ok = True
        self._died = False
        self._held: dict[TP, deque[Held]] = {}
        self._paused: set[TP] = set()
        self._thread = threading.Thread(target=self._run, name="delay", daemon=True)

    @property
    def healthy(self) -> bool:
        """Its thread runs, its last round went through, and the broker answers."""
        consumer = self.consumer
        return (self._ok and not self._died
                and (consumer is None or consumer.reachable))

    def start(self) -> DelayForwarder:
        self._thread.start()
        return self

    def join(self, timeout: float) -> None:
        self._thread.join(timeout)

    def _run(self) -> None:
        try:
            self._loop()
        except BaseException as exc:
            # A bug, not an outage: a dead forwarder would strand every retry while the
            # dispatcher looks fine. Stop the process so its supervisor restarts it.
            self._died, self.last_error = True, f"delay forwarder died: {exc!r}"
            log.exception("delay forwarder died; stopping the dispatcher")
            self.stop.set()

    def _loop(self) -> None:
        consumer = self.consumer = GroupConsumer(
            consumer_config(self.bootstrap, self.group_id, "hookstream-delay", self.membership),
            self.tiers.topics, on_revoke=self._forget, on_lost=self._forget)
        backoff_s = 0.5
        try:
            while not self.stop.is_set():
                try:
                    self._round(consumer)
                    self._ok, self.last_error = True, None
                    backoff_s = 0.5
                except (KafkaTransient, KafkaPermanent) as exc:
                    self._ok, self.last_error = False, str(exc)
                    self.metrics.errors.labels("kafka").inc()
                    log.warning("delay round failed; reading it again",
                                extra={"error": str(exc), "backoff_s": backoff_s})
                    self._recover(consumer, exc)
                    self.stop.wait(backoff_s)
                    backoff_s = min(backoff_s * 2, MAX_BACKOFF_S)
        finally:
            consumer.close()
            self.publisher.close()

    def _forget(self, partitions: list[TP]) -> None:
        # Unacknowledged, uncommitted: the next owner reads these records again.
        for tp in partitions:
            self._held.pop(tp, None)
            self._paused.discard(tp)

    def _recover(self, consumer: GroupConsumer, failure: Exception) -> None:
        # Nothing of the failed round was committed: drop what is held and read it again
        # from the first uncommitted record of each partition.
        self._held.clear()
        paused, self._paused = list(self._paused), set()
        if paused and not isinstance(failure, KafkaPermanent):
            try:
                consumer.resume(paused)
            except (KafkaTransient, KafkaPermanent) as exc:
                failure = KafkaPermanent(f"resume: {exc}")
        consumer.recover(failure)

    def _round(self, consumer: GroupConsumer) -> None:
        # What is due goes on first, acknowledged and committed before the next wait: a
        # record released here never waits out the consume timeout below.
        released, offsets = self._release(time.time())
        if released:
            self._publish(released)
            # Not waiting for the coordinator's answer: a synchronous commit waits as long
            # as it does not answer, and every retry waits with it. A failed commit means
            # those records are handed on again (their stale claims send nothing).
            consumer.commit(offsets, asynchronous=True)
        self._flow_control(consumer, time.time())
        heads = [buf[0].release_at for buf in self._held.values() if buf]
        timeout = 0.5
        if heads:
            timeout = max(0.005, min(timeout, min(heads) - time.time()))
        self.metrics.paused.set(len(self._paused))
        self.metrics.head_wait.set(max(0.0, min(heads) - time.time()) if heads else 0.0)
        for msg in consumer.consume(500, timeout):
            tp = cast(TP, (msg.topic(), msg.partition()))  # a record always has both
            self._held.setdefault(tp, deque()).append(self._hold(msg))

    def _publish(self, released: list[HandOn]) -> None:
        """Every record acknowledged, one by one (the failed ones republished), before
        any offset moves past it; only a stop gives up (nothing is committed then)."""
        if not publish_until_acked_sync(
                self.publisher, [h.record for h in released], on_failure=self._publish_failed,
                give_up=self.stop.is_set, sleep=self.stop.wait):
            raise KafkaTransient(f"stopping with {len(released)} records not acknowledged")
        for h in released:
            self.metrics.forwarded.labels(h.tier, h.to).inc()
            if h.late_s is not None:
                self.metrics.lateness.observe(h.late_s)

    def _publish_failed(self, failed: list[Failed]) -> None:
        self._ok = False
        self.last_error = f"kafka: {len(failed)} records not acknowledged ({failed[0].error})"
        self.metrics.errors.labels("kafka").inc()
        log.warning("hand-on failed; republishing the failed records",
                    extra={"count": len(failed), "first": failed[0].error})

    def _hold(self, msg: Message) -> Held:
        _, ts_ms = msg.timestamp()
        release_at = ts_ms / 1000.0 + self.tiers.delay_of(msg.topic() or "")
        try:
            task: DeliveryTask | None = DeliveryTask.decode(msg.value() or b"")
        except CodecError:
            task = None  # handed on (to the dead-letter topic) at once
        return Held(msg, task, release_at)

    def _release(self, now: float) -> tuple[list[HandOn], dict[TP, int]]:
        released: list[HandOn] = []
        offsets: dict[TP, int] = {}
        for tp, buf in self._held.items():
            while buf and buf[0].release_at <= now:
                held = buf.popleft()
                released.append(self._hand_on(held, now))
                offsets[tp] = cast(int, held.msg.offset()) + 1
        return released, offsets

    def _flow_control(self, consumer: GroupConsumer, now: float) -> None:
        for tp, buf in self._held.items():
            wait = (buf[0].release_at - now) if buf else 0.0
            should_pause = len(buf) >= MAX_HELD or wait > PREFETCH_S
            if should_pause and tp not in self._paused:
                consumer.pause([tp])
                self._paused.add(tp)
            elif not should_pause and tp in self._paused:
                consumer.resume([tp])
                self._paused.discard(tp)

    def _hand_on(self, held: Held, now: float) -> HandOn:
        msg, task = held.msg, held.task
        tier = (msg.topic() or "").rsplit(".", 1)[-1]
        if task is None:
            log.error("undecodable record in a delay tier; sent to the dead-letter topic",
                      extra={"topic": msg.topic(), "offset": msg.offset()})
            return HandOn(Record(self.topics.dead, msg.key() or b"", msg.value() or b"",
                                 headers=[("hookstream-reason", b"undecodable delay record")]),
                          tier, "dead", None)
        remaining = task.due_at.timestamp() - now
        # The last stretch, shorter than any tier, is waited out by the dispatcher, which
        # holds the task in memory until its exact due time: waiting here would make the
        # records behind this one wait for it (head of line) and bunch jittered retries
        # back into one burst; one more hop would add a whole tier.
        hop = None if remaining <= self.tiers.delays_s[0] else self.tiers.route(remaining)
        if hop is None:
            return HandOn(Record(self.topics.deliveries, msg.key(), msg.value() or b""),
                          tier, "deliveries", max(0.0, -remaining))
        return HandOn(Record(self.tiers.topic(hop), msg.key(), msg.value() or b""),
                      tier, "tier", None)
