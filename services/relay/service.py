"""The relay: outbox rows → the events topic, marked published only once acknowledged."""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from typing import Any

import psycopg
from confluent_kafka import KafkaError, Message, Producer
from hookstream.relay.validate import rejection_reason
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from psycopg.rows import dict_row

from hookstream import queries
from hookstream.codec import EventEnvelope
from hookstream.kafka import BrokerUnavailable, new_producer
from hookstream.settings import RelaySettings
from hookstream.topics import Topics

log = logging.getLogger("hookstream.relay")
Q = queries.load("relay")
NOTIFY_CHANNEL = "hookstream_outbox"


class RelayMetrics:
    def __init__(self, registry: CollectorRegistry):
        self.published = Counter(
            "hookstream_relay_published_total", "Outbox rows published and acknowledged",
            registry=registry)
        self.quarantined = Counter(
            "hookstream_relay_quarantined_total", "Outbox rows quarantined as malformed",
            ["reason"], registry=registry)
        self.errors = Counter(
            "hookstream_relay_errors_total", "Publish rounds that failed", ["kind"],
            registry=registry)
        self.batch_seconds = Histogram(
            "hookstream_relay_batch_seconds", "Duration of one publish round",
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
            registry=registry)
        self.batch_rows = Histogram(
            "hookstream_relay_batch_rows", "Rows per publish round",
            buckets=(1, 10, 50, 100, 250, 500, 1000, 2000, 5000), registry=registry)
        self.backlog = Gauge(
            "hookstream_outbox_backlog_rows", "Unpublished outbox rows", registry=registry)
        self.oldest_age = Gauge(
            "hookstream_outbox_oldest_unpublished_seconds",
            "Age of the oldest unpublished outbox row", registry=registry)
        self.last_success = Gauge(
            "hookstream_relay_last_success_timestamp_seconds",
            "When a publish round last completed", registry=registry)


def _category(reason: str) -> str:
    # Bounded label values for the metric; the full reason is on the row.
    for key in ("schema_version", "event type", "exceeds", "JSON"):
        if key in reason:
            return key.replace(" ", "_").lower()
    return "other"


@dataclass
class RoundResult:
    published: int
    quarantined: int
    full: bool


class Relay:
    def __init__(self, settings: RelaySettings, registry: CollectorRegistry):
        self.settings = settings
        self.topics = Topics(settings.topic_prefix)
        self.metrics = RelayMetrics(registry)
        self.producer: Producer = new_producer(settings.kafka_bootstrap, "hookstream-relay")
        self.stop = threading.Event()
        self.healthy = False
        self.last_error: str | None = None

    # -- one round -------------------------------------------------------------------
    def publish_round(self, conn: psycopg.Connection[Any]) -> RoundResult:
        started = time.monotonic()
        with conn.transaction():
            rows = conn.execute(Q["lock_batch"], {"limit": self.settings.batch_size}).fetchall()
            bad_ids: list[int] = []
            bad_reasons: list[str] = []
            good: list[dict[str, Any]] = []
            for row in rows:
                reason = rejection_reason(
                    type=row["type"], schema_version=row["schema_version"],
                    payload=row["payload"], max_payload_bytes=self.settings.max_payload_bytes)
                if reason is None:
                    good.append(row)
                else:
                    bad_ids.append(row["id"])
                    bad_reasons.append(reason)
            if bad_ids:
                conn.execute(Q["quarantine"], {"ids": bad_ids, "reasons": bad_reasons})
                for row_id, reason in zip(bad_ids, bad_reasons, strict=True):
                    log.warning("outbox row quarantined", extra={"outbox_id": row_id, "reason": reason})
                    self.metrics.quarantined.labels(_category(reason)).inc()

            acked = self._produce_all(good)
            if acked:
                conn.execute(Q["mark_published"], {"ids": acked})
        # Counted only after the transaction committed: a crash before this point
        # republishes the batch (duplicates are absorbed downstream), never loses it.
        self.metrics.published.inc(len(acked))
        self.metrics.batch_rows.observe(len(rows))
        self.metrics.batch_seconds.observe(time.monotonic() - started)
        if len(acked) < len(good):
            raise BrokerUnavailable(f"{len(good) - len(acked)} of {len(good)} records not acknowledged")
        return RoundResult(len(acked), len(bad_ids), full=len(rows) >= self.settings.batch_size)

    def _produce_all(self, rows: list[dict[str, Any]]) -> list[int]:
        if not rows:
            return []
        acked: list[int] = []
        failures: list[KafkaError] = []

        def report(err: KafkaError | None, msg: Message, row_id: int) -> None:
            if err is None:
                acked.append(row_id)
            else:
                failures.append(err)

        for row in rows:
            envelope = EventEnvelope(
                event_id=row["event_id"], tenant=row["tenant"], type=row["type"],
                schema_version=row["schema_version"], object_id=row["object_id"],
                object_version=row["object_version"], coalescing_key=row["coalescing_key"],
                occurred_at=row["occurred_at"], committed_at=row["created_at"],
                payload=bytes(row["payload"]))
            self._produce(envelope, row["id"], report)
        # One wait per batch: the produce calls above are pipelined by librdkafka.
        self.producer.flush(self.settings.poll_interval_s * 30 + 30)
        if failures:
            log.error("publish failures", extra={"count": len(failures), "first": str(failures[0])})
        return acked

    def _produce(self, envelope: EventEnvelope, row_id: int, report: Any) -> None:
        while True:
            try:
                self.producer.produce(
                    self.topics.events, key=envelope.tenant.encode(), value=envelope.encode(),
                    on_delivery=lambda err, msg, rid=row_id: report(err, msg, rid))
                return
            except BufferError:
                # Local queue full: serve delivery reports until there is room.
                self.producer.poll(0.1)

    def refresh_backlog(self, conn: psycopg.Connection[Any]) -> None:
        row = conn.execute(Q["backlog"]).fetchone()
        assert row is not None
        self.metrics.backlog.set(row["rows"])
        self.metrics.oldest_age.set(float(row["oldest_age_s"]))

    # -- the loop --------------------------------------------------------------------
    def run(self) -> None:
        backoff_s = 0.5
        while not self.stop.is_set():
            try:
                self._run_connected()
            except (psycopg.OperationalError, BrokerUnavailable) as exc:
                self.healthy = False
                self.last_error = str(exc)
                kind = "database" if isinstance(exc, psycopg.OperationalError) else "broker"
                self.metrics.errors.labels(kind).inc()
                log.warning("relay round failed; backing off",
                            extra={"error": str(exc), "kind": kind, "backoff_s": backoff_s})
                self.stop.wait(backoff_s)
                backoff_s = min(backoff_s * 2, 10.0)
            else:
                backoff_s = 0.5
        self.producer.flush(10)

    def _run_connected(self) -> None:
        dsn = self.settings.database_url
        with psycopg.connect(dsn, row_factory=dict_row, autocommit=True) as conn, \
                psycopg.connect(dsn, autocommit=True) as listener:
            listener.execute(f"LISTEN {NOTIFY_CHANNEL}")
            last_backlog = 0.0
            while not self.stop.is_set():
                result = self.publish_round(conn)
                self.healthy, self.last_error = True, None
                self.metrics.last_success.set_to_current_time()
                now = time.monotonic()
                if now - last_backlog >= 1.0:
                    self.refresh_backlog(conn)
                    last_backlog = now
                if result.full:
                    continue  # more rows are waiting: no sleeping between full batches
                # Wake on the first NOTIFY, or poll as the fallback (a NOTIFY can be
                # missed while reconnecting; a row is never waited on longer than this).
                for _ in listener.notifies(timeout=self.settings.poll_interval_s, stop_after=1):
                    pass
