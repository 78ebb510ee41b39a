"""The relay: outbox rows → the events topic, marked published only once acknowledged.

Shape of the process:

* ``lanes`` publish loops (threads, one PostgreSQL connection each) share one idempotent
  producer. A round claims a batch (one short statement: see ``outbox_store``), produces
  every row (pipelined by librdkafka), waits once for the batch's acknowledgements with
  no transaction open, then marks the acknowledged rows published and hands the failed
  ones back. While one lane waits for the broker the other claims and encodes the next
  batch: the claims that let replicas share the table let lanes share it, so there is
  no hand-off between them.
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
from dataclasses import dataclass
from typing import Any

from hookstream.relay.outbox_store import OutboxStore, notifications
from hookstream.relay.validate import (
    REASON_CATEGORIES,
    broker_rejection_reason,
    reason_category,
    rejection_reason,
)
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from hookstream.core.counts import COUNT_CAP
from hookstream.core.event_key import event_key
from hookstream.core.fastcodec import encode_envelope
from hookstream.core.settings import RelaySettings
from hookstream.core.topics import Topics
from hookstream.io.kafka import BrokerUnavailable, Failed, KafkaTransient, Publisher, Record
from hookstream.io.pg import DatabaseUnavailable
from hookstream.ops.observability import at_zero
from hookstream.ops.retention import maintain

log = logging.getLogger("hookstream.relay")
NOTIFY_CHANNEL = "hookstream_outbox"
# A claim outlives the longest wait for its acknowledgements (the producer's message
# timeout, plus the publisher's grace for unreported records) by this margin; it only
# matters for a relay that is connected but stuck, since a dead one's claims die with its
# session.
CLAIM_MARGIN_S = 30.0
ERROR_KINDS = ("database", "broker")  # the `kind` of hookstream_relay_errors_total


def _refusal(failure: Failed) -> str | None:
    """The quarantine reason when the broker refused the record itself, else None."""
    return broker_rejection_reason(failure.code, failure.error.partition(": ")[2])


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
            "hookstream_outbox_backlog_rows",
            f"Unpublished outbox rows, counted up to {COUNT_CAP} (then: at least that many)",
            registry=registry)
        self.oldest_age = Gauge(
            "hookstream_outbox_oldest_unpublished_seconds",
            "Age of the oldest unpublished outbox row", registry=registry)
        self.last_success = Gauge(
            "hookstream_relay_last_success_timestamp_seconds",
            "When a publish round last completed", registry=registry)
        self.purged = Counter(
            "hookstream_relay_purged_total",
            "Published outbox rows deleted after the retention", registry=registry)
        # History maintenance (hookstream.ops.retention), from whichever replica ran it.
        # Counted in days, but named without the unit: Prometheus' base unit is seconds.
        self.history_dropped = Counter(
            "hookstream_history_expired_dropped_total",
            "Expired days of history (events, deliveries, attempts) dropped", registry=registry)
        self.history_held = Gauge(
            "hookstream_history_expired_held",
            "Expired days kept because deliveries of theirs are still pending or in flight",
            registry=registry)
        self.history_strays = Gauge(
            "hookstream_history_default_rows",
            f"History rows in no day partition (counted up to {COUNT_CAP})", registry=registry)
        self.history_last_run = Gauge(
            "hookstream_history_last_maintained_timestamp_seconds",
            "When history maintenance last completed", registry=registry)


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
        # One producer shared by the lanes; each record's own delivery report decides.
        self.publisher = Publisher(
            settings.kafka_bootstrap, "hookstream-relay",
            **{"message.timeout.ms": int(settings.ack_timeout_s * 1000),
               # the default 100k messages would cap a round of lanes × batch_size
               "queue.buffering.max.messages": 1_000_000})
        self.stop = threading.Event()
        self.last_error: str | None = None
        self._lane_ok: dict[int, bool] = {}
        # NOTIFY generation: a lane records it before reading the outbox and sleeps only
        # while it is unchanged, so a commit landing mid-round is never slept through.
        self._wake = threading.Condition()
        self._notified = 0

    @property
    def healthy(self) -> bool:
        return bool(self._lane_ok) and all(self._lane_ok.values())

    @property
    def claim_s(self) -> float:
        return self.publisher.report_wait_s + CLAIM_MARGIN_S

    # -- one round -------------------------------------------------------------------
    def publish_round(self, store: OutboxStore) -> RoundResult:
        started = time.monotonic()
        rows = store.claim(self.settings.batch_size, self.claim_s)
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
        # No transaction is open here, however long the broker takes.
        acked, failed = self._publish(good, bad)
        store.settle(acked, bad, [f.record.ref for f in failed])
        # Counted only once settled: a crash before this point republishes the batch
        # (duplicates are absorbed downstream), never loses it.
        for row_id, reason in bad.items():
            log.warning("outbox row quarantined", extra={"outbox_id": row_id, "reason": reason})
            self.metrics.quarantined.labels(reason_category(reason)).inc()
        self.metrics.published.inc(len(acked))
        self.metrics.batch_rows.observe(len(rows))
        self.metrics.batch_seconds.observe(time.monotonic() - started)
        if failed:
            # Handed back unpublished: the next round (after a backoff) sends them again.
            raise KafkaTransient(f"{len(failed)} of {len(good)} records not acknowledged"
                                 f" ({failed[0].error})")
        return RoundResult(len(acked), len(bad), full=len(rows) >= self.settings.batch_size)

    def _publish(self, rows: list[tuple[Any, ...]], bad: dict[int, str],
                 ) -> tuple[list[int], list[Failed]]:
        """Publish every row and wait for the reports. Returns the rows acknowledged and
        the transient failures; rows the broker refuses for good are added to ``bad``."""
        topic = self.topics.events
        # Keyed by tenant and coalescing key / object / event (core.event_key), not by
        # tenant alone: a hot tenant spreads over the partitions, while events that may
        # supersede each other still meet on one.
        records = [
            Record(topic, event_key(tenant, key, object_id, event_id), encode_envelope(
                event_id, tenant, type_, version, object_id, object_version, key,
                occurred_us, committed_us, payload), ref=row_id)
            for (row_id, event_id, tenant, type_, version, object_id, object_version, key,
                 occurred_us, committed_us, payload) in rows]
        failed = self.publisher.publish(records)
        refused = [f for f in failed if _refusal(f) is not None]
        if refused:
            # The broker judges a whole record batch: one oversized record makes it
            # refuse its innocent neighbours too. Each refused record is sent again
            # alone, and only a record refused on its own is quarantined.
            failed = [f for f in failed if _refusal(f) is None]
            for f in refused:
                for again in self.publisher.publish([f.record]):
                    reason = _refusal(again)
                    if reason is None:
                        failed.append(again)
                    else:
                        bad[again.record.ref] = reason
        if failed:
            log.error("publish failures", extra={"count": len(failed), "first": failed[0].error})
        unacknowledged = {f.record.ref for f in failed} | bad.keys()
        return [r.ref for r in records if r.ref not in unacknowledged], failed

    def purge(self, store: OutboxStore, budget_s: float = 2.0) -> int:
        """Delete published rows older than the retention, batch by batch, within a
        time budget (the next interval continues). Returns the rows deleted."""
        deleted = 0
        deadline = time.monotonic() + budget_s
        while time.monotonic() < deadline and not self.stop.is_set():
            n = store.purge_batch(self.settings.retention_s, self.settings.purge_batch_size)
            deleted += n
            self.metrics.purged.inc(n)
            if n < self.settings.purge_batch_size:
                break
        return deleted

    def maintain_history(self, store: OutboxStore) -> None:
        run = maintain(store.conn, history_days=self.settings.history_days,
                       days_ahead=self.settings.history_days_ahead)
        if not run.ran:  # another replica is at it
            return
        self.metrics.history_dropped.inc(len(run.dropped))
        self.metrics.history_held.set(len(run.held))
        self.metrics.history_strays.set(run.strays)
        self.metrics.history_last_run.set_to_current_time()

    def refresh_backlog(self, store: OutboxStore) -> None:
        rows, oldest_age_s = store.backlog()
        self.metrics.backlog.set(rows)
        self.metrics.oldest_age.set(oldest_age_s)

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
        self.publisher.close()

    def _supervised(self, what: str, loop: Callable[[Any], None], arg: Any) -> None:
        """Run ``loop`` until stopped; on a broker or database error back off (capped,
        exponential) and run it again with fresh connections."""
        backoff_s = 0.25
        while not self.stop.is_set():
            try:
                loop(arg)
            except (DatabaseUnavailable, BrokerUnavailable) as exc:
                kind = "database" if isinstance(exc, DatabaseUnavailable) else "broker"
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
        with OutboxStore.connect(self.settings.database_url) as store:
            while not self.stop.is_set():
                seen = self._notified
                result = self.publish_round(store)
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
        for notified in notifications(self.settings.database_url, NOTIFY_CHANNEL, 0.5):
            if self.stop.is_set():
                return
            if notified:
                self._bump()

    def _bump(self) -> None:
        with self._wake:
            self._notified += 1
            self._wake.notify_all()

    def _housekeeping(self, _: None) -> None:
        with OutboxStore.connect(self.settings.database_url) as store:
            next_purge = next_history = time.monotonic()
            while not self.stop.is_set():
                self.refresh_backlog(store)
                if time.monotonic() >= next_purge:
                    deleted = self.purge(store)
                    if deleted:
                        log.info("published outbox rows purged", extra={"rows": deleted})
                    next_purge = time.monotonic() + self.settings.purge_interval_s
                if time.monotonic() >= next_history:
                    self.maintain_history(store)
                    next_history = time.monotonic() + self.settings.history_maintain_interval_s
                self.stop.wait(1.0)
