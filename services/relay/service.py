"""The relay: outbox rows → the events topic, marked published only once acknowledged.

Shape of the process:

* ``lanes`` publish loops (threads, one PostgreSQL connection each) share one idempotent
  producer. A round locks a batch (``FOR UPDATE SKIP LOCKED``), produces every row
  (pipelined by librdkafka), waits once for the batch's acknowledgements, then marks the
  acknowledged rows published and commits. While one lane waits for the broker the other
  locks and encodes the next batch: the same SKIP LOCKED that lets replicas share the
  table lets lanes share it, so there is no hand-off between them.
* a listener thread holds ``LISTEN hookstream_outbox`` and wakes the lanes within
  milliseconds of a commit; ``poll_interval_s`` is the fallback.
* a housekeeping thread refreshes the backlog gauges and purges published rows past
  the retention in small batches.

Every loop reconnects on its own with capped exponential backoff, so a broker or a
database restart costs a few seconds of latency, never a row.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import psycopg
from confluent_kafka import KafkaError, KafkaException, Message, Producer
from hookstream.relay.validate import (
    REASON_CATEGORIES,
    broker_rejection_reason,
    reason_category,
    rejection_reason,
)
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from hookstream import queries
from hookstream.fastcodec import encode_envelope
from hookstream.kafka import BrokerUnavailable, new_producer
from hookstream.observability import at_zero
from hookstream.settings import RelaySettings
from hookstream.topics import Topics

log = logging.getLogger("hookstream.relay")
Q = queries.load("relay")
NOTIFY_CHANNEL = "hookstream_outbox"
# Errors of the database connection: the loop reconnects. InterfaceError is what psycopg
# raises on a connection the server already closed (a restart between two statements).
DB_ERRORS = (psycopg.OperationalError, psycopg.InterfaceError)
BROKER_ERRORS = (BrokerUnavailable, KafkaException)
ERROR_KINDS = ("database", "broker")  # the `kind` of hookstream_relay_errors_total


class RelayMetrics:
    def __init__(self, registry: CollectorRegistry):
        self.registry = registry
        self.published = Counter(
            "hookstream_relay_published_total",
            "Outbox rows published and acknowledged (the publish rate is its rate())",
            registry=registry)
        self.quarantined = at_zero(Counter(
            "hookstream_relay_quarantined_total", "Outbox rows quarantined as malformed",
            ["reason"], registry=registry), REASON_CATEGORIES)
        self.errors = at_zero(Counter(
            "hookstream_relay_errors_total", "Publish rounds that failed", ["kind"],
            registry=registry), ERROR_KINDS)
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
        self.purged = Counter(
            "hookstream_relay_purged_total",
            "Published outbox rows deleted after the retention", registry=registry)


@dataclass
class RoundResult:
    published: int
    quarantined: int
    full: bool


@dataclass
class _Acks:
    """Delivery reports of one round. Filled from librdkafka callbacks, which run in
    whichever lane thread polls: list.append is atomic, so no lock is needed."""

    acked: list[int] = field(default_factory=list)
    failed: list[tuple[int, KafkaError]] = field(default_factory=list)

    def callback(self, row_id: int) -> Callable[[KafkaError | None, Message], None]:
        def report(err: KafkaError | None, _msg: Message) -> None:
            if err is None:
                self.acked.append(row_id)
            else:
                self.failed.append((row_id, err))
        return report

    def done(self, produced: int) -> bool:
        return len(self.acked) + len(self.failed) >= produced


class Relay:
    def __init__(self, settings: RelaySettings, registry: CollectorRegistry):
        self.settings = settings
        self.topics = Topics(settings.topic_prefix)
        self.metrics = RelayMetrics(registry)
        self.producer: Producer = self._new_producer()
        self.stop = threading.Event()
        self.last_error: str | None = None
        self._lane_ok: dict[int, bool] = {}
        self._producer_lock = threading.Lock()
        # NOTIFY generation: a lane records it before reading the outbox and sleeps only
        # while it is unchanged, so a commit landing mid-round is never slept through.
        self._wake = threading.Condition()
        self._notified = 0

    @property
    def healthy(self) -> bool:
        return bool(self._lane_ok) and all(self._lane_ok.values())

    def _new_producer(self) -> Producer:
        return new_producer(
            self.settings.kafka_bootstrap, "hookstream-relay",
            **{"message.timeout.ms": int(self.settings.ack_timeout_s * 1000),
               # the default 100k messages would cap a round of lanes × batch_size
               "queue.buffering.max.messages": 1_000_000})

    # -- one round -------------------------------------------------------------------
    def publish_round(self, conn: psycopg.Connection[Any]) -> RoundResult:
        started = time.monotonic()
        with conn.transaction():
            rows = conn.execute(Q["lock_batch"], {"limit": self.settings.batch_size},
                                binary=True).fetchall()
            bad: dict[int, str] = {}
            good: list[tuple[Any, ...]] = []
            for row in rows:
                reason = rejection_reason(
                    type=row[3], schema_version=row[4], payload=row[10],
                    max_payload_bytes=self.settings.max_payload_bytes)
                if reason is None:
                    good.append(row)
                else:
                    bad[row[0]] = reason
            acks = self._produce_all(good, bad)
            if bad:
                conn.execute(Q["quarantine"], {"ids": list(bad), "reasons": list(bad.values())})
            if acks.acked:
                conn.execute(Q["mark_published"], {"ids": acks.acked})
        # Counted only after the transaction committed: a crash before this point
        # republishes the batch (duplicates are absorbed downstream), never loses it.
        for row_id, reason in bad.items():
            log.warning("outbox row quarantined", extra={"outbox_id": row_id, "reason": reason})
            self.metrics.quarantined.labels(reason_category(reason)).inc()
        self.metrics.published.inc(len(acks.acked))
        self.metrics.batch_rows.observe(len(rows))
        self.metrics.batch_seconds.observe(time.monotonic() - started)
        acked = set(acks.acked)
        unacknowledged = [r[0] for r in good if r[0] not in acked and r[0] not in bad]
        if unacknowledged:
            # They stay unpublished and unlocked: the next round (after a backoff) sends
            # them again.
            transient = [e for i, e in acks.failed if i not in bad]
            first = transient[0] if transient else "no delivery report in time"
            raise BrokerUnavailable(
                f"{len(unacknowledged)} of {len(good)} records not acknowledged ({first})")
        return RoundResult(len(acks.acked), len(bad), full=len(rows) >= self.settings.batch_size)

    def _produce_all(self, rows: list[tuple[Any, ...]], bad: dict[int, str]) -> _Acks:
        """Produce every row, then wait once for the batch's reports. Rows the broker
        refuses for good are added to ``bad``; transient failures stay unpublished."""
        acks = _Acks()
        values: dict[int, tuple[bytes, bytes]] = {}
        for (row_id, event_id, tenant, type_, version, object_id, object_version, key,
             occurred_us, committed_us, payload) in rows:
            values[row_id] = (tenant.encode(), encode_envelope(
                event_id, tenant, type_, version, object_id, object_version, key,
                occurred_us, committed_us, payload))
        self._send(values, acks, bad)
        refused = [row_id for row_id, err in acks.failed
                   if broker_rejection_reason(err.name(), err.str()) is not None]
        if refused:
            # The broker judges a whole record batch: one oversized record makes it
            # refuse its innocent neighbours too. Each refused record is sent again
            # alone, and only a record refused on its own is quarantined.
            acks.failed = [(i, e) for i, e in acks.failed if i not in set(refused)]
            for row_id in refused:
                self._send({row_id: values[row_id]}, acks, bad)
        for row_id, err in acks.failed:
            reason = broker_rejection_reason(err.name(), err.str())
            if reason is not None:
                bad[row_id] = reason
            elif err.fatal():
                self._replace_producer(self.producer, err)
        if acks.failed:
            log.error("publish failures",
                      extra={"count": len(acks.failed), "first": str(acks.failed[0][1])})
        return acks

    def _send(self, values: dict[int, tuple[bytes, bytes]], acks: _Acks,
              bad: dict[int, str]) -> None:
        """Produce the records (pipelined by librdkafka), then wait once for all their
        delivery reports. A record the client refuses outright goes to ``bad``."""
        topic = self.topics.events
        producer = self.producer
        expected = len(acks.acked) + len(acks.failed)
        for row_id, (key, value) in values.items():
            while True:
                try:
                    producer.produce(topic, value, key, on_delivery=acks.callback(row_id))
                    expected += 1
                    break
                except BufferError:
                    producer.poll(0.05)  # local queue full: serve reports until there is room
                except KafkaException as exc:
                    err = exc.args[0]
                    reason = broker_rejection_reason(err.name(), err.str())
                    if reason is None:
                        raise
                    bad[row_id] = reason
                    break
        deadline = time.monotonic() + self.settings.ack_timeout_s + 5
        while not acks.done(expected) and time.monotonic() < deadline:
            producer.poll(0.05)

    def _replace_producer(self, failed: Producer, err: KafkaError) -> None:
        # A fatal error (e.g. the idempotent producer's sequence broken) leaves the
        # instance unusable; the next round gets a fresh one.
        with self._producer_lock:
            if self.producer is failed:
                log.error("producer failed fatally; replacing it", extra={"error": str(err)})
                self.producer = self._new_producer()

    def purge(self, conn: psycopg.Connection[Any], budget_s: float = 2.0) -> int:
        """Delete published rows older than the retention, batch by batch, within a
        time budget (the next interval continues). Returns the rows deleted."""
        deleted = 0
        deadline = time.monotonic() + budget_s
        while time.monotonic() < deadline and not self.stop.is_set():
            cur = conn.execute(Q["purge_published"], {
                "retention_s": self.settings.retention_s,
                "limit": self.settings.purge_batch_size})
            deleted += cur.rowcount
            self.metrics.purged.inc(cur.rowcount)
            if cur.rowcount < self.settings.purge_batch_size:
                break
        return deleted

    def refresh_backlog(self, conn: psycopg.Connection[Any]) -> None:
        row = conn.execute(Q["backlog"]).fetchone()
        assert row is not None
        self.metrics.backlog.set(row[0])
        self.metrics.oldest_age.set(float(row[1]))

    # -- the loops -------------------------------------------------------------------
    def run(self) -> None:
        threads = [threading.Thread(target=self._supervised, args=(f"lane-{i}", self._lane, i),
                                    name=f"relay-lane-{i}")
                   for i in range(self.settings.lanes)]
        threads.append(threading.Thread(target=self._supervised,
                                        args=("listener", self._listen, None),
                                        name="relay-listener", daemon=True))
        threads.append(threading.Thread(target=self._supervised,
                                        args=("housekeeping", self._housekeeping, None),
                                        name="relay-housekeeping", daemon=True))
        for i in range(self.settings.lanes):
            self._lane_ok[i] = False
        for t in threads:
            t.start()
        self.stop.wait()
        with self._wake:
            self._wake.notify_all()
        # Lanes finish (and commit) the round they are in; the others hold no state.
        for t in threads:
            t.join(self.settings.ack_timeout_s + 10)
        self.producer.flush(10)

    def _supervised(self, what: str, loop: Callable[[Any], None], arg: Any) -> None:
        """Run ``loop`` until stopped; on a broker or database error back off (capped,
        exponential) and run it again with fresh connections."""
        backoff_s = 0.25
        while not self.stop.is_set():
            try:
                loop(arg)
            except (*DB_ERRORS, *BROKER_ERRORS) as exc:
                kind = "database" if isinstance(exc, DB_ERRORS) else "broker"
                if isinstance(arg, int):
                    self._lane_ok[arg] = False
                self.last_error = f"{kind}: {exc}"
                self.metrics.errors.labels(kind).inc()
                log.warning("relay loop failed; backing off", extra={
                    "loop": what, "error": str(exc), "kind": kind, "backoff_s": backoff_s})
                self.stop.wait(backoff_s)
                backoff_s = min(backoff_s * 2, self.settings.max_backoff_s)
            except Exception:
                # A bug, not an outage: stop the service so the supervisor restarts it
                # instead of running on with a dead lane.
                log.exception("relay loop crashed", extra={"loop": what})
                self.stop.set()
                raise
            else:
                backoff_s = 0.25

    def _lane(self, lane: int) -> None:
        with psycopg.connect(self.settings.database_url, autocommit=True,
                             connect_timeout=10) as conn:
            while not self.stop.is_set():
                seen = self._notified
                result = self.publish_round(conn)
                self._lane_ok[lane] = True
                if self.healthy:
                    self.last_error = None
                self.metrics.last_success.set_to_current_time()
                if result.full:
                    continue  # more rows are waiting: no sleeping between full batches
                self._sleep_until_notified(seen)

    def _sleep_until_notified(self, seen: int) -> None:
        """Sleep until a NOTIFY newer than ``seen``, a stop, or the poll interval."""
        def woken() -> bool:
            return self._notified != seen or self.stop.is_set()

        with self._wake:
            self._wake.wait_for(woken, self.settings.poll_interval_s)

    def _listen(self, _: None) -> None:
        with psycopg.connect(self.settings.database_url, autocommit=True,
                             connect_timeout=10) as conn:
            conn.execute(f"LISTEN {NOTIFY_CHANNEL}")
            # (Re)connected: a NOTIFY may have been missed while we were away.
            self._bump()
            while not self.stop.is_set():
                for _n in conn.notifies(timeout=0.5):
                    self._bump()

    def _bump(self) -> None:
        with self._wake:
            self._notified += 1
            self._wake.notify_all()

    def _housekeeping(self, _: None) -> None:
        with psycopg.connect(self.settings.database_url, autocommit=True,
                             connect_timeout=10) as conn:
            next_purge = time.monotonic()
            while not self.stop.is_set():
                self.refresh_backlog(conn)
                if time.monotonic() >= next_purge:
                    deleted = self.purge(conn)
                    if deleted:
                        log.info("published outbox rows purged", extra={"rows": deleted})
                    next_purge = time.monotonic() + self.settings.purge_interval_s
                self.stop.wait(1.0)
