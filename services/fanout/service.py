"""Fanout: events topic → immutable event rows, one delivery row per subscribed endpoint,
and one delivery task per row on the deliveries topic (keyed by endpoint)."""

from __future__ import annotations

import hashlib
import logging
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import psycopg
from confluent_kafka import Message
from hookstream.fanout import store as fanout_store
from hookstream.fanout.audiences import AudienceCache
from hookstream.fanout.metrics import FanoutMetrics
from hookstream.fanout.plan import Audience, plan
from hookstream.fanout.records import dead_letter, delivery_tasks, next_offsets
from hookstream.fanout.store import FanoutStore, Row
from prometheus_client import CollectorRegistry

from hookstream.core.codec import CodecError, EventEnvelope
from hookstream.core.settings import FanoutSettings
from hookstream.core.topics import Topics
from hookstream.io.kafka import (
    TP,
    Failed,
    GroupConsumer,
    KafkaPermanent,
    KafkaTransient,
    Publisher,
    Record,
    Sending,
    consumer_config,
    publish_until_acked_sync,
)
from hookstream.io.pg import DatabaseUnavailable, DataRejected
from hookstream.ops.lag import LagSnapshot, smallest_lag_s
from hookstream.ops.sampling import Sample
from hookstream.policy import batching

log = logging.getLogger("hookstream.fanout")


@dataclass
class BatchResult:
    events: int
    created: int
    tasks: int
    conflicts: int
    undecodable: int
    coalesced: int = 0
    statements: int = 0
    refused: int = 0  # well-formed, but PostgreSQL refused to store them: dead-lettered


class Fanout:
    def __init__(self, settings: FanoutSettings, registry: CollectorRegistry):
        self.settings = settings
        self.topics = Topics(settings.topic_prefix)
        self.metrics = FanoutMetrics(registry)
        self.publisher = Publisher(settings.kafka_bootstrap, "hookstream-fanout")
        self.stop = threading.Event()
        self.consumer: GroupConsumer | None = None
        self._ok = False
        self._error: str | None = None
        # The pipeline (issue #15): one statement's tasks are on their way to the broker
        # while the next batch's rows are written. Offsets wait for them: ``_due`` holds
        # the offsets of batches fully processed except for those acknowledgements.
        self._sending: Sending | None = None
        self._due: dict[TP, int] = {}
        # Offsets are committed at most once per commit_interval_s (monotonic time of
        # the last): one per batch cost the broker a write for every ~5 events at
        # 250 events/s, ~15 % of its CPU (benchmarks/pipeline.py; BENCHMARKS.md, Pipeline).
        self._committed_at = -float("inf")
        # Batching that grows when the dispatchers are behind (policy.batching): the
        # process's consumer-lag sampler, once the runner hands it over.
        self._lag: Callable[[], Sample[LagSnapshot] | None] = lambda: None
        self._lag_seen_at = -1.0
        self._lag_gather_s = settings.batch_gather_s
        # And when this process alone carries a high load (policy.batching): its tasks
        # produced over the last second.
        self._throughput = batching.Throughput()
        self._gather_s = settings.batch_gather_s
        self.metrics.gather_seconds.set(self._gather_s)
        self.audiences = AudienceCache(settings.audience_ttl_s)

    def watch_lag(self, latest: Callable[[], Sample[LagSnapshot] | None]) -> None:
        self._lag = latest

    def gather_s(self) -> float:
        """How long a started batch waits for more events: the configured minimum, or
        more while this process's throughput is high or the dispatchers' least-behind
        partition is seconds behind (policy.batching), whichever is longer."""
        s = self.settings
        load = batching.load_gather_s(self._throughput.per_s(time.monotonic()),
                                      s.gather_from_per_s, s.load_gather_s)
        gather = max(self._lag_gather(), load)
        if gather != self._gather_s:
            self._gather_s = gather
            self.metrics.gather_seconds.set(gather)
        return gather

    def _lag_gather(self) -> float:
        """The wait the dispatchers' lag calls for (re-read when the sampler has a new
        snapshot; a stale one counts as unknown)."""
        sample = self._lag()
        if sample is None or sample.taken_at == self._lag_seen_at:
            return self._lag_gather_s
        self._lag_seen_at = now = sample.taken_at
        fresh = time.time() - now < 3 * self.settings.lag_sample_interval_s
        lag = (smallest_lag_s(sample.value, self.settings.dispatcher_group_id,
                              self.topics.deliveries, now) if fresh else None)
        self._lag_gather_s = max(self.settings.batch_gather_s,
                                 batching.gather_s(lag, self.settings.max_gather_s))
        return self._lag_gather_s

    @property
    def healthy(self) -> bool:
        """Connected, the last batch went through, and the broker answers."""
        return self._ok and self.consumer is not None and self.consumer.reachable

    @property
    def last_error(self) -> str | None:
        if self.consumer is not None and not self.consumer.reachable:
            return self.consumer.last_error
        return self._error

    def _status(self, error: str | None) -> None:
        self._ok, self._error = error is None, error

    # -- one batch: decoded events in, rows and tasks out ----------------------------
    def process(self, conn: psycopg.Connection[Any], messages: list[Message]) -> BatchResult:
        """One batch over ``conn``, an autocommitted connection."""
        return self._process(FanoutStore(conn), messages)

    def _process(self, store: FanoutStore, messages: list[Message]) -> BatchResult:
        started = time.monotonic()
        envelopes: list[EventEnvelope] = []
        origin: dict[uuid.UUID, Message] = {}
        dead: list[Record] = []
        for msg in messages:
            try:
                e = EventEnvelope.decode(msg.value() or b"")
            except CodecError as exc:
                dead.append(self._dead_letter(msg, f"undecodable event record: {exc}"))
            else:
                envelopes.append(e)
                origin[e.event_id] = msg
        undecodable = len(dead)
        # The same event twice in one batch (relay retry) is one event.
        unique = list({e.event_id: e for e in envelopes}.values())
        result = BatchResult(0, 0, 0, 0, undecodable)
        fast = self._store_and_fan_out(store, unique, result) if unique else []
        if fast is not None:
            accepted = fast
        else:  # the general path: nothing of the batch was written by the attempt
            accepted, again, conflicts, refused = self._store_isolating(store, unique)
            dead += [self._dead_letter(origin[e.event_id], f"event refused by PostgreSQL: {why}")
                     for e, why in refused]
            result.events, result.conflicts = len(unique) - len(refused), conflicts
            result.refused = len(refused)
            if accepted:
                self._fan_out(store, accepted, again, result)
        # Before the offsets move past them, the dead letters must be durable too.
        self._publish(dead)
        now = datetime.now(UTC)
        elapsed = time.monotonic() - started
        for e in accepted:
            self.metrics.event_seconds.observe(elapsed)
            self.metrics.lag_seconds.observe(max(0.0, (now - e.committed_at).total_seconds()))
        return result

    def _store_isolating(self, store: FanoutStore, unique: list[EventEnvelope],
                         ) -> tuple[list[EventEnvelope], set[uuid.UUID], int,
                                    list[tuple[EventEnvelope, str]]]:
        """``_store_events``, except that events PostgreSQL refuses (a NUL in a text
        field: well-formed for Avro, not storable) are found by halving the batch and
        returned with the reason instead of failing it: retried, they would fail the
        same way forever and jam their partition."""
        try:
            accepted, again, conflicts = self._store_events(store, unique)
            return accepted, again, conflicts, []
        except DataRejected as exc:
            if len(unique) == 1:
                log.error("event refused by PostgreSQL; dead-lettered", extra={
                    "event_id": str(unique[0].event_id), "error": str(exc)})
                return [], set(), 0, [(unique[0], str(exc)[:500])]
        mid = len(unique) // 2
        a1, g1, c1, r1 = self._store_isolating(store, unique[:mid])
        a2, g2, c2, r2 = self._store_isolating(store, unique[mid:])
        return a1 + a2, g1 | g2, c1 + c2, r1 + r2

    def _store_events(self, store: FanoutStore, unique: list[EventEnvelope],
                      ) -> tuple[list[EventEnvelope], set[uuid.UUID], int]:
        """Store new events (immutable, with their hash). Returns the events to fan out
        (new ones, and ones seen before with the same bytes: ``again``) and the number of
        conflicts (same id, other bytes: rejected, recorded, not fanned out)."""
        conflicts = 0
        again: set[uuid.UUID] = set()
        # One statement, committed on its own (no BEGIN/COMMIT round trips: issue #15):
        # the rows are immutable, so the hash comparison below needs no shared
        # transaction — a crash before it leaves the events stored and the batch
        # unacknowledged, and the next pass compares them as copies seen before.
        shas = [hashlib.sha256(e.payload).digest() for e in unique]
        new_ids = store.store_events(unique, shas)
        again, conflicts = self._compare_copies(
            store, [(e, s) for e, s in zip(unique, shas, strict=True)
                   if e.event_id not in new_ids])
        accepted = [e for e in unique if e.event_id in new_ids or e.event_id in again]
        return accepted, again, conflicts

    def _compare_copies(self, store: FanoutStore,
                        seen_before: list[tuple[EventEnvelope, bytes]],
                        ) -> tuple[set[uuid.UUID], int]:
        """Events stored before this batch: the ones with the same bytes (``again``: fanned
        out once more, their missing rows completed) and the number with other bytes
        (rejected, recorded, never fanned out)."""
        again: set[uuid.UUID] = set()
        conflicts = 0
        if not seen_before:
            return again, conflicts
        stored = store.stored_hashes([e for e, _ in seen_before])
        for e, sha in seen_before:
            if stored.get(e.event_id) == sha:
                again.add(e.event_id)
            else:
                conflicts += 1
                store.record_conflict(e.event_id, sha)
                log.error("event id reused with different bytes; rejected",
                          extra={"event_id": str(e.event_id)})
        return again, conflicts

    def _store_and_fan_out(self, store: FanoutStore, unique: list[EventEnvelope],
                           result: BatchResult) -> list[EventEnvelope] | None:
        """The common batch — no coalescing key, every delivery in one planned statement —
        stored and fanned out in one statement and one commit (store_and_create), its
        tasks handed to the producer. Events stored before (relay duplicates, a restart
        half way, a reused id) then take the general path's comparison and second pass.
        Returns the events accepted, or None when the batch needs the general path:
        then nothing of it was written (the statement is all or nothing)."""
        if any(e.coalescing_key is not None for e in unique):
            return None  # superseding must commit with the rows it compares: _fan_out
        keys = [(e.tenant, e.type) for e in unique]
        try:
            statements = plan(keys, self._audiences(store, keys),
                              self.settings.max_rows_per_statement)
            if len(statements) > 1:
                return None
            # hashed only here: a batch sent to the general path is hashed there
            shas = [hashlib.sha256(e.payload).digest() for e in unique]
            chosen = [(unique[s.event], s) for s in (statements[0] if statements else [])]
            rows = store.store_and_create(unique, shas, chosen, self.settings.retry_window_s)
        except DataRejected:
            # (a text PostgreSQL cannot store, even as a query parameter): the general
            # path isolates the event that carries it
            return None
        stored_now = {r[1] for r in rows if r[0] is None}
        again, conflicts = self._compare_copies(
            store, [(e, sha) for e, sha in zip(unique, shas, strict=True)
                   if str(e.event_id) not in stored_now])
        result.events, result.conflicts = len(unique), conflicts
        result.statements += 1
        self._emit([r for r in rows if r[0] is not None], set(), unique, result)
        copies = [e for e in unique if e.event_id in again]
        if copies:
            self._fan_out(store, copies, again, result)
        return [e for e in unique if str(e.event_id) in stored_now or e.event_id in again]

    def _fan_out(self, store: FanoutStore, events: list[EventEnvelope],
                 again: set[uuid.UUID], result: BatchResult) -> None:
        """Delivery rows and tasks, in statements of bounded size (plan.py). Each
        statement commits on its own and its tasks are published (and acknowledged, every
        one) right after, so memory
        holds one statement's rows; a crash half way leaves committed rows behind,
        which the next pass over the event (offsets were not committed) keeps and
        completes — see create_deliveries."""
        page = self.settings.max_rows_per_statement
        keys = [(e.tenant, e.type) for e in events]
        for statement in plan(keys, self._audiences(store, keys), page):
            chosen = [events[s.event] for s in statement]
            rows, superseded = store.create_deliveries(chosen, statement, again,
                                                       self.settings.retry_window_s)
            result.statements += 1
            self._emit(rows, superseded, events, result)

    def _audiences(self, store: FanoutStore, keys: list[tuple[str, str]],
                   ) -> dict[tuple[str, str], Audience]:
        """How many endpoints each (tenant, type) reaches. Recent answers serve
        (audiences.py says why a stale one is safe): at moderate load most batches then
        skip this statement."""
        audiences, missing = self.audiences.split(keys)
        if missing:
            # A pair the query returns no row for reaches nobody now.
            found = dict.fromkeys(missing, Audience(0))
            found.update(store.audiences(missing, self.settings.max_rows_per_statement))
            self.audiences.keep(found)
            audiences.update(found)
        return audiences

    def _emit(self, rows: list[Row], superseded: set[str],
              events: list[EventEnvelope], result: BatchResult) -> None:
        """One statement's delivery rows → their tasks, handed to the producer."""
        result.created += sum(1 for r in rows if r[7])
        result.coalesced += len(superseded)
        self.metrics.statement_rows.observe(len(rows))
        tasks = delivery_tasks(self.topics.deliveries, rows, superseded, events,
                               datetime.now(UTC))
        self._send(tasks)
        result.tasks += len(tasks)

    def _send(self, records: list[Record]) -> None:
        """Hand ``records`` to the producer without waiting, once the previous
        statement's tasks are all acknowledged (so memory and the broker hold one
        statement's worth at a time)."""
        self._settle()
        if records:
            self._sending = self.publisher.send(records)

    def _settle(self, *, commit_now: bool = False) -> None:
        """Wait for the tasks on their way (republishing exactly the failed ones until
        acknowledged); then the offsets that waited for them may be committed: now if
        ``commit_now``, else once ``commit_interval_s`` has passed since the last commit
        (until then they wait in ``_due``; a crash re-reads them, their rows exist and
        their tasks claim nothing)."""
        sending, self._sending = self._sending, None
        if sending is not None:
            failed = sending.wait()
            if failed:
                self._publish_failed(failed)
                self._publish([f.record for f in failed])
        now = time.monotonic()
        if self._due and self.consumer is not None and (
                commit_now or now - self._committed_at >= self.settings.commit_interval_s):
            due, self._due = self._due, {}
            self._committed_at = now
            # Rows and tasks are durable: commit, without waiting for the answer (a
            # failed commit means a re-read, never a loss).
            self.consumer.commit(due, asynchronous=True)

    def _revoked(self, partitions: list[TP]) -> None:
        """Partitions about to move (inside ``consume``): with no task on its way, every
        offset in ``_due`` is settled and its commit is sent now; the request precedes
        the rejoin on the coordinator's connection, so the next owner starts after it
        instead of reading those events again. Not waiting for the answer: a synchronous
        commit waits as long as the coordinator does not answer. With tasks on their
        way, their offsets wait for them as always (a re-read at worst)."""
        if self._sending is not None or not self._due or self.consumer is None:
            return
        due, self._due = self._due, {}
        try:
            self.consumer.commit(due, asynchronous=True)
            self._committed_at = time.monotonic()
        except (KafkaTransient, KafkaPermanent) as exc:
            log.warning("commit on revoke failed; those events will be read again",
                        extra={"error": str(exc), "partitions": [p for _, p in partitions]})

    def _abandon(self) -> None:
        """After a failed batch: forget the tasks on their way and the offsets waiting
        for them. Nothing is lost — those offsets were not committed, so the batches
        are read again (their rows kept, their tasks sent again: see create_deliveries),
        and a task sent twice claims once."""
        self._sending, self._due = None, {}

    def _publish(self, records: list[Record]) -> None:
        """Publish until every record is acknowledged, republishing exactly the failed
        ones; only a stop gives up (raising: the batch is not committed)."""
        if records and not publish_until_acked_sync(
                self.publisher, records, on_failure=self._publish_failed,
                give_up=self.stop.is_set, sleep=self.stop.wait):
            raise KafkaTransient(f"stopping with {len(records)} records not acknowledged")

    def _publish_failed(self, failed: list[Failed]) -> None:
        self._status(f"kafka: {len(failed)} records not acknowledged ({failed[0].error})")
        self.metrics.errors.labels("broker").inc()
        log.error("publish failed; retrying the failed records",
                  extra={"count": len(failed), "first": failed[0].error})

    def _dead_letter(self, msg: Message, reason: str) -> Record:
        log.error("event record sent to the dead-letter topic",
                  extra={"reason": reason, "partition": msg.partition(), "offset": msg.offset()})
        return dead_letter(self.topics.dead, msg, reason)

    # -- the loop --------------------------------------------------------------------
    def run(self) -> None:
        """Never exits on its own for an outage: a failed batch is read again (the
        consumer rewound, or rebuilt when it cannot be), after a capped backoff."""
        consumer = self.consumer = GroupConsumer(
            consumer_config(self.settings.kafka_bootstrap, self.settings.group_id,
                            "hookstream-fanout", self.settings.membership),
            [self.topics.events], on_revoke=self._revoked)
        backoff_s = 0.5
        try:
            while not self.stop.is_set():
                try:
                    self._run_connected(consumer)
                except (DatabaseUnavailable, KafkaTransient, KafkaPermanent) as exc:
                    self._abandon()
                    self._status(str(exc))
                    kind = "database" if isinstance(exc, DatabaseUnavailable) else "broker"
                    self.metrics.errors.labels(kind).inc()
                    log.warning("fanout batch failed; rewinding and backing off",
                                extra={"error": str(exc), "backoff_s": backoff_s})
                    # Nothing of the failed batch was committed: it is read again.
                    consumer.recover(exc)
                    self.stop.wait(backoff_s)
                    backoff_s = min(backoff_s * 2, self.settings.max_backoff_s)
                else:
                    backoff_s = 0.5
        finally:
            try:  # a clean stop: the last batch's tasks and offsets, if they get through
                self._settle(commit_now=True)
            except (KafkaTransient, KafkaPermanent) as exc:
                log.warning("last batch not settled; it will be read again",
                            extra={"error": str(exc)})
            consumer.close()  # leaves the group at once; nothing uncommitted is claimed done
            self.publisher.close()

    def _run_connected(self, consumer: GroupConsumer) -> None:
        # Driver errors leave as DatabaseUnavailable (retried), or untranslated for a bug.
        with fanout_store.connect(self.settings.database_url) as store:
            self._status(None)
            while not self.stop.is_set():
                # With tasks on their way, only look: if nothing is there, settle them
                # (and commit) before waiting for more.
                batch = consumer.consume(self.settings.batch_size,
                                         timeout_s=0.0 if self._sending else 0.5,
                                         gather_s=self.gather_s())
                if not batch:
                    self._settle()
                    continue
                started = time.monotonic()
                result = self._process(store, batch)
                # Its rows are durable; its offsets are committed once its last tasks
                # are acknowledged too (the next settle).
                for tp, offset in next_offsets(batch).items():
                    self._due[tp] = max(offset, self._due.get(tp, 0))
                if not self._sending:
                    self._settle()
                self._status(None)
                self.metrics.batch_seconds.observe(time.monotonic() - started)
                self.metrics.events.labels("fanned_out").inc(result.events - result.conflicts)
                self.metrics.events.labels("conflict").inc(result.conflicts)
                self.metrics.events.labels("undecodable").inc(result.undecodable)
                self.metrics.events.labels("refused").inc(result.refused)
                self.metrics.deliveries.inc(result.created)
                self.metrics.tasks.inc(result.tasks)
                self._throughput.add(result.tasks, time.monotonic())
                self.metrics.coalesced.inc(result.coalesced)

