"""Fanout: events topic → immutable event rows, one delivery row per subscribed endpoint,
and one delivery task per row on the deliveries topic (keyed by endpoint)."""

from __future__ import annotations

import hashlib
import logging
import threading
import time
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import psycopg
from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    Producer,
    TopicPartition,
)
from prometheus_client import CollectorRegistry, Counter, Histogram
from psycopg.rows import dict_row

from hookstream import queries
from hookstream.codec import CodecError, DeliveryTask, EventEnvelope, TaskKind
from hookstream.kafka import BrokerUnavailable, consumer_config, flush_or_raise, new_producer
from hookstream.settings import FanoutSettings
from hookstream.topics import Topics

log = logging.getLogger("hookstream.fanout")
Q = queries.load("fanout")


class FanoutMetrics:
    def __init__(self, registry: CollectorRegistry):
        self.events = Counter(
            "hookstream_fanout_events_total", "Events consumed", ["result"], registry=registry)
        self.deliveries = Counter(
            "hookstream_fanout_deliveries_created_total", "Delivery rows created",
            registry=registry)
        self.tasks = Counter(
            "hookstream_fanout_tasks_produced_total", "Delivery tasks produced", registry=registry)
        self.batch_seconds = Histogram(
            "hookstream_fanout_batch_seconds", "Duration of one fan-out batch",
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
            registry=registry)
        self.lag_seconds = Histogram(
            "hookstream_fanout_event_lag_seconds", "Outbox commit → delivery rows durable",
            buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300),
            registry=registry)
        self.errors = Counter(
            "hookstream_fanout_errors_total", "Batches that failed", ["kind"], registry=registry)


@dataclass
class BatchResult:
    events: int
    created: int
    tasks: int
    conflicts: int
    undecodable: int


class Fanout:
    def __init__(self, settings: FanoutSettings, registry: CollectorRegistry):
        self.settings = settings
        self.topics = Topics(settings.topic_prefix)
        self.metrics = FanoutMetrics(registry)
        self.producer: Producer = new_producer(settings.kafka_bootstrap, "hookstream-fanout")
        self.stop = threading.Event()
        self.healthy = False
        self.last_error: str | None = None
        self._delivery_failed = False

    # -- pure-ish batch step: decoded events in, rows and tasks out -------------------
    def process(self, conn: psycopg.Connection[Any], messages: list[Message]) -> BatchResult:
        envelopes: list[EventEnvelope] = []
        undecodable = 0
        for msg in messages:
            try:
                envelopes.append(EventEnvelope.decode(msg.value() or b""))
            except CodecError as exc:
                undecodable += 1
                self._to_dead_letter(msg, f"undecodable event record: {exc}")
        # The same event twice in one batch (relay retry) is one event.
        unique = list({e.event_id: e for e in envelopes}.values())
        created: list[dict[str, Any]] = []
        resend: list[dict[str, Any]] = []
        conflicts = 0
        if unique:
            with conn.transaction():
                shas = [hashlib.sha256(e.payload).digest() for e in unique]
                new_ids = {r["event_id"] for r in conn.execute(Q["store_events"], {
                    "event_id": [e.event_id for e in unique],
                    "tenant": [e.tenant for e in unique],
                    "type": [e.type for e in unique],
                    "schema_version": [e.schema_version for e in unique],
                    "object_id": [e.object_id for e in unique],
                    "object_version": [e.object_version for e in unique],
                    "coalescing_key": [e.coalescing_key for e in unique],
                    "occurred_at": [e.occurred_at for e in unique],
                    "committed_at": [e.committed_at for e in unique],
                    "payload": [e.payload for e in unique],
                    "sha": shas,
                })}
                seen_before = [(e, s) for e, s in zip(unique, shas, strict=True)
                               if e.event_id not in new_ids]
                accepted = [e for e in unique if e.event_id in new_ids]
                again: list[uuid.UUID] = []
                if seen_before:
                    stored = {r["event_id"]: bytes(r["payload_sha256"]) for r in conn.execute(
                        Q["stored_hashes"], {"ids": [e.event_id for e, _ in seen_before]})}
                    for e, sha in seen_before:
                        if stored.get(e.event_id) == sha:
                            accepted.append(e)
                            again.append(e.event_id)
                        else:
                            conflicts += 1
                            conn.execute(Q["record_conflict"], {"event_id": e.event_id, "sha": sha})
                            log.error("event id reused with different bytes; rejected",
                                      extra={"event_id": str(e.event_id)})
                if accepted:
                    created = conn.execute(Q["create_deliveries"], {
                        "event_id": [e.event_id for e in accepted],
                        "tenant": [e.tenant for e in accepted],
                        "type": [e.type for e in accepted],
                        "coalescing_key": [e.coalescing_key for e in accepted],
                        "committed_at": [e.committed_at for e in accepted],
                        "window_s": self.settings.retry_window_s,
                    }).fetchall()
                if again:
                    fresh = {r["delivery_id"] for r in created}
                    resend = [r for r in conn.execute(Q["pending_deliveries_of"], {"ids": again})
                              if r["delivery_id"] not in fresh]
        committed = {e.event_id: e.committed_at for e in unique}
        now = datetime.now(UTC)
        for row in [*created, *resend]:
            task = DeliveryTask(
                delivery_id=row["delivery_id"], event_id=row["event_id"],
                endpoint_id=row["endpoint_id"], tenant=row["tenant"], kind=TaskKind.NEW,
                due_at=now, committed_at=committed[row["event_id"]],
                lease_version=row["lease_version"])
            self._produce(self.topics.deliveries, task.key, task.encode())
        flush_or_raise(self.producer, 30)
        for e in unique:
            self.metrics.lag_seconds.observe(max(0.0, (now - e.committed_at).total_seconds()))
        return BatchResult(len(unique), len(created), len(created) + len(resend), conflicts,
                           undecodable)

    def _produce(self, topic: str, key: bytes, value: bytes, headers: Any = None) -> None:
        while True:
            try:
                self.producer.produce(topic, key=key, value=value, headers=headers,
                                      on_delivery=self._on_delivery)
                return
            except BufferError:
                self.producer.poll(0.1)

    def _on_delivery(self, err: KafkaError | None, msg: Message) -> None:
        if err is not None:
            self._delivery_failed = True
            log.error("task produce failed", extra={"error": str(err)})

    def _to_dead_letter(self, msg: Message, reason: str) -> None:
        log.error("event record sent to the dead-letter topic",
                  extra={"reason": reason, "partition": msg.partition(), "offset": msg.offset()})
        self._produce(self.topics.dead, msg.key() or b"", msg.value() or b"", headers=[
            ("hookstream-reason", reason.encode()),
            ("hookstream-source", f"{msg.topic()}/{msg.partition()}/{msg.offset()}".encode()),
        ])

    # -- the loop --------------------------------------------------------------------
    def run(self) -> None:
        consumer = Consumer(consumer_config(
            self.settings.kafka_bootstrap, self.settings.group_id, "hookstream-fanout"))
        consumer.subscribe([self.topics.events])
        backoff_s = 0.5
        try:
            while not self.stop.is_set():
                try:
                    self._run_connected(consumer)
                except (psycopg.OperationalError, BrokerUnavailable, KafkaException) as exc:
                    self.healthy, self.last_error = False, str(exc)
                    kind = "database" if isinstance(exc, psycopg.OperationalError) else "broker"
                    self.metrics.errors.labels(kind).inc()
                    log.warning("fanout batch failed; rewinding and backing off",
                                extra={"error": str(exc), "backoff_s": backoff_s})
                    self._rewind(consumer)
                    self.stop.wait(backoff_s)
                    backoff_s = min(backoff_s * 2, 10.0)
                else:
                    backoff_s = 0.5
        finally:
            consumer.close()  # leaves the group at once; nothing uncommitted is claimed done
            self.producer.flush(10)

    def _rewind(self, consumer: Consumer) -> None:
        # The failed batch was not committed: seek every assigned partition back to its
        # committed offset so the batch is processed again instead of skipped.
        try:
            assigned = consumer.assignment()
            if assigned:
                for tp in consumer.committed(assigned, timeout=10):
                    if tp.offset >= 0:
                        consumer.seek(tp)
                    else:
                        consumer.seek(TopicPartition(tp.topic, tp.partition, OFFSET_BEGINNING))
        except KafkaException as exc:
            log.warning("rewind failed; leaving the group to restart cleanly",
                        extra={"error": str(exc)})
            raise

    def _run_connected(self, consumer: Consumer) -> None:
        with psycopg.connect(self.settings.database_url, row_factory=dict_row,
                             autocommit=True) as conn:
            self.healthy, self.last_error = True, None
            while not self.stop.is_set():
                messages = consumer.consume(self.settings.batch_size, timeout=0.5)
                batch = []
                for msg in messages:
                    err = msg.error()
                    if err is None:
                        batch.append(msg)
                    elif err.code() != KafkaError._PARTITION_EOF:
                        raise KafkaException(err)
                if not batch:
                    continue
                started = time.monotonic()
                self._delivery_failed = False
                result = self.process(conn, batch)
                if self._delivery_failed:
                    raise BrokerUnavailable("some delivery tasks were not acknowledged")
                # Only now are rows and tasks durable: commit the consumed offsets.
                consumer.commit(asynchronous=False, offsets=_next_offsets(batch))
                self.metrics.batch_seconds.observe(time.monotonic() - started)
                self.metrics.events.labels("fanned_out").inc(result.events - result.conflicts)
                self.metrics.events.labels("conflict").inc(result.conflicts)
                self.metrics.events.labels("undecodable").inc(result.undecodable)
                self.metrics.deliveries.inc(result.created)
                self.metrics.tasks.inc(result.tasks)


def _next_offsets(messages: list[Message]) -> list[TopicPartition]:
    highest: dict[tuple[str, int], int] = {}
    for m in messages:
        key = (m.topic(), m.partition())
        highest[key] = max(highest.get(key, -1), m.offset())
    return [TopicPartition(t, p, o + 1) for (t, p), o in highest.items()]
