"""Fanout: events topic → immutable event rows, one delivery row per subscribed endpoint,
and one delivery task per row on the deliveries topic (keyed by endpoint)."""

from __future__ import annotations

import hashlib
import logging
import threading
import time
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
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
from hookstream.fanout.plan import Audience, plan
from prometheus_client import CollectorRegistry, Counter, Histogram

from hookstream import queries
from hookstream.codec import CodecError, EventEnvelope
from hookstream.fastcodec import encode_new_task
from hookstream.kafka import (
    BrokerUnavailable,
    consumer_config,
    flush_or_raise,
    new_producer,
    produce,
)
from hookstream.observability import at_zero
from hookstream.settings import FanoutSettings
from hookstream.topics import Topics

log = logging.getLogger("hookstream.fanout")
Q = queries.load("fanout")


class FanoutMetrics:
    def __init__(self, registry: CollectorRegistry):
        self.events = at_zero(Counter(
            "hookstream_fanout_events_total", "Events consumed", ["result"], registry=registry),
            ("fanned_out", "conflict", "undecodable"))
        self.deliveries = Counter(
            "hookstream_fanout_deliveries_created_total", "Delivery rows created",
            registry=registry)
        self.tasks = Counter(
            "hookstream_fanout_tasks_produced_total", "Delivery tasks produced", registry=registry)
        self.coalesced = Counter(
            "hookstream_fanout_coalesced_total",
            "Pending deliveries superseded by the delivery of a newer event of the same "
            "(endpoint, coalescing key)", registry=registry)
        self.batch_seconds = Histogram(
            "hookstream_fanout_batch_seconds", "Duration of one fan-out batch",
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
            registry=registry)
        self.event_seconds = Histogram(
            "hookstream_fanout_event_seconds",
            "Fan-out duration per event: from its batch's start until its rows are "
            "committed and its tasks acknowledged",
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
            registry=registry)
        self.statement_rows = Histogram(
            "hookstream_fanout_statement_rows",
            "Delivery rows returned by one creating statement (bounded by "
            "FANOUT_MAX_ROWS_PER_STATEMENT)",
            buckets=(1, 10, 100, 500, 1000, 2000, 5000, 10000, 20000, 50000),
            registry=registry)
        self.lag_seconds = Histogram(
            "hookstream_fanout_event_lag_seconds", "Outbox commit → delivery rows durable",
            buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300),
            registry=registry)
        self.errors = at_zero(Counter(
            "hookstream_fanout_errors_total", "Batches that failed", ["kind"], registry=registry),
            ("database", "broker"))


@dataclass
class BatchResult:
    events: int
    created: int
    tasks: int
    conflicts: int
    undecodable: int
    coalesced: int = 0
    statements: int = 0


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)
# Errors of the database connection: reconnect. InterfaceError is what psycopg raises on
# a connection the server already closed (a restart between two statements).
DB_ERRORS = (psycopg.OperationalError, psycopg.InterfaceError)


def _epoch_us(at: datetime) -> int:
    return (at - _EPOCH) // _MICROSECOND


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

    # -- one batch: decoded events in, rows and tasks out ----------------------------
    def process(self, conn: psycopg.Connection[Any], messages: list[Message]) -> BatchResult:
        started = time.monotonic()
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
        accepted, again, conflicts = self._store_events(conn, unique) if unique else ([], set(), 0)
        result = BatchResult(len(unique), 0, 0, conflicts, undecodable)
        if accepted:
            self._fan_out(conn, accepted, again, result)
        flush_or_raise(self.producer, 30)
        now = datetime.now(UTC)
        elapsed = time.monotonic() - started
        for e in accepted:
            self.metrics.event_seconds.observe(elapsed)
            self.metrics.lag_seconds.observe(max(0.0, (now - e.committed_at).total_seconds()))
        return result

    def _store_events(self, conn: psycopg.Connection[Any], unique: list[EventEnvelope],
                      ) -> tuple[list[EventEnvelope], set[uuid.UUID], int]:
        """Store new events (immutable, with their hash). Returns the events to fan out
        (new ones, and ones seen before with the same bytes: ``again``) and the number of
        conflicts (same id, other bytes: rejected, recorded, not fanned out)."""
        conflicts = 0
        again: set[uuid.UUID] = set()
        with conn.transaction():
            shas = [hashlib.sha256(e.payload).digest() for e in unique]
            new_ids = {r[0] for r in conn.execute(Q["store_events"], {
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
            if seen_before:
                stored = {r[0]: bytes(r[1]) for r in conn.execute(
                    Q["stored_hashes"], {"ids": [e.event_id for e, _ in seen_before]})}
                for e, sha in seen_before:
                    if stored.get(e.event_id) == sha:
                        again.add(e.event_id)
                    else:
                        conflicts += 1
                        conn.execute(Q["record_conflict"], {"event_id": e.event_id, "sha": sha})
                        log.error("event id reused with different bytes; rejected",
                                  extra={"event_id": str(e.event_id)})
        accepted = [e for e in unique if e.event_id in new_ids or e.event_id in again]
        return accepted, again, conflicts

    def _fan_out(self, conn: psycopg.Connection[Any], events: list[EventEnvelope],
                 again: set[uuid.UUID], result: BatchResult) -> None:
        """Delivery rows and tasks, in statements of bounded size (plan.py). Each
        statement commits on its own and its tasks are produced right after, so memory
        holds one statement's rows; a crash half way leaves committed rows behind,
        which the next pass over the event (offsets were not committed) keeps and
        completes — see create_deliveries."""
        page = self.settings.max_rows_per_statement
        keys = [(e.tenant, e.type) for e in events]
        audiences = {
            (r[0], r[1]): Audience(r[2], tuple(r[3]))
            for r in conn.execute(Q["audiences"], {
                "tenant": [k[0] for k in keys], "type": [k[1] for k in keys], "page": page})
        }
        committed_us = {str(e.event_id): _epoch_us(e.committed_at) for e in events}
        due_us = _epoch_us(datetime.now(UTC))
        topic = self.topics.deliveries
        for statement in plan(keys, audiences, page):
            chosen = [events[s.event] for s in statement]
            with conn.transaction():
                rows = conn.execute(Q["create_deliveries"], {
                    "event_id": [e.event_id for e in chosen],
                    "tenant": [e.tenant for e in chosen],
                    "type": [e.type for e in chosen],
                    "coalescing_key": [e.coalescing_key for e in chosen],
                    "committed_at": [e.committed_at for e in chosen],
                    "again": [e.event_id in again for e in chosen],
                    "after": [s.after for s in statement],
                    "upto": [s.upto for s in statement],
                    "window_s": self.settings.retry_window_s,
                }).fetchall()
                keyed = [r for r in rows if r[7] and r[6] is not None]
                superseded: set[str] = set()
                if keyed:
                    superseded = {r[0] for r in conn.execute(Q["coalesce"], {
                        "endpoint_id": [r[2] for r in keyed], "key": [r[6] for r in keyed]})}
            result.statements += 1
            result.created += sum(1 for r in rows if r[7])
            result.coalesced += len(superseded)
            self.metrics.statement_rows.observe(len(rows))
            # A row superseded in the same transaction needs no task (it can never be
            # claimed); rows superseded from earlier batches already had theirs.
            for (delivery_id, event_id, endpoint_id, key, tenant, lease_version,
                 _ck, _created) in rows:
                if delivery_id in superseded:
                    continue
                value = encode_new_task(delivery_id, event_id, endpoint_id, tenant, due_us,
                                        committed_us[event_id], lease_version)
                self._produce(topic, key, value)
                result.tasks += 1
            self.producer.poll(0)  # serve delivery reports as we go

    def _produce(self, topic: str, key: bytes, value: bytes, headers: Any = None) -> None:
        produce(self.producer, topic, key, value, headers=headers, on_delivery=self._on_delivery)

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
                except (*DB_ERRORS, BrokerUnavailable, KafkaException) as exc:
                    self.healthy, self.last_error = False, str(exc)
                    kind = "database" if isinstance(exc, DB_ERRORS) else "broker"
                    self.metrics.errors.labels(kind).inc()
                    log.warning("fanout batch failed; rewinding and backing off",
                                extra={"error": str(exc), "backoff_s": backoff_s})
                    self._rewind(consumer)
                    self.stop.wait(backoff_s)
                    backoff_s = min(backoff_s * 2, self.settings.max_backoff_s)
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
        with psycopg.connect(self.settings.database_url, autocommit=True,
                             connect_timeout=10) as conn:
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
                self.metrics.coalesced.inc(result.coalesced)


def _next_offsets(messages: list[Message]) -> list[TopicPartition]:
    highest: dict[tuple[str, int], int] = {}
    for m in messages:
        key = (m.topic(), m.partition())
        highest[key] = max(highest.get(key, -1), m.offset())
    return [TopicPartition(t, p, o + 1) for (t, p), o in highest.items()]
