"""The one produce primitive: an idempotent producer, and per-call results.

Every record's own delivery report decides whether it is durable, never an empty local
queue: a record librdkafka gave up on after message.timeout.ms leaves the queue empty
too. A publish call returns exactly the records that failed; the caller retries those.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, cast

from confluent_kafka import KafkaError, KafkaException, Message, Producer

from hookstream.core.aio import wait_set
from hookstream.io.kafka.config import producer_config

log = logging.getLogger("hookstream.io.kafka")


@dataclass(frozen=True, slots=True)
class Record:
    topic: str
    key: bytes | None
    value: bytes
    headers: list[tuple[str, bytes]] | None = None
    ref: Any = None  # the caller's own handle (a row id...), handed back with a failure


@dataclass(frozen=True, slots=True)
class Failed:
    record: Record
    error: str  # "<code>: <librdkafka's text>", for logs and health
    retriable: bool
    code: str = "NO_REPORT"  # librdkafka's error name (MSG_SIZE_TOO_LARGE...), for decisions


_PERMANENT = frozenset({
    KafkaError.MSG_SIZE_TOO_LARGE, KafkaError.INVALID_MSG_SIZE,
    KafkaError.RECORD_LIST_TOO_LARGE, KafkaError.TOPIC_AUTHORIZATION_FAILED,
    KafkaError._INVALID_ARG, KafkaError.INVALID_RECORD,
})


def failure_of(record: Record, err: KafkaError) -> Failed:
    return Failed(record, f"{err.name()}: {err.str()}", retriable=err.code() not in _PERMANENT,
                  code=err.name())


class _Batch:
    """The reports of one publish call. Reports arrive on the poll thread while the caller
    may still be producing (and refusing) records: the counter is guarded."""

    __slots__ = ("_lock", "_signal", "failed", "pending", "reported")

    def __init__(self, n: int, signal: Callable[[], object]):
        self._lock = threading.Lock()
        self._signal = signal
        self.failed: list[Failed] = []
        self.pending = n
        self.reported = [False] * n

    def reporter(self, i: int, record: Record) -> Callable[[KafkaError | None, Message], None]:
        def on_delivery(err: KafkaError | None, _msg: Message) -> None:
            self.settle(i, None if err is None else failure_of(record, err))
        return on_delivery

    def settle(self, i: int, failure: Failed | None) -> None:
        with self._lock:
            if self.reported[i]:
                return
            self.reported[i] = True
            if failure is not None:
                self.failed.append(failure)
            self.pending -= 1
            last = self.pending == 0
        if last:
            self._signal()

    def outcome(self, records: Sequence[Record]) -> list[Failed]:
        """The failures, plus every record still without a report (given up waiting)."""
        with self._lock:
            missing = [Failed(r, "no delivery report in time", True)
                       for r, seen in zip(records, self.reported, strict=True) if not seen]
            return [*self.failed, *missing]


class Sending:
    """Records handed to the producer, their delivery reports still arriving."""

    __slots__ = ("_batch", "_done", "_wait_s", "records")

    def __init__(self, records: Sequence[Record], batch: _Batch, done: threading.Event,
                 wait_s: float):
        self.records, self._batch, self._done, self._wait_s = records, batch, done, wait_s

    def wait(self, wait_s: float | None = None) -> list[Failed]:
        """Block until every record has its report (or ``wait_s``, by default the
        producer's own timeout and a margin, passed); returns the records that failed,
        counting those still without a report."""
        if self.records:
            self._done.wait(self._wait_s if wait_s is None else wait_s)
        return self._batch.outcome(self.records)


class Publisher:
    """One idempotent producer, its delivery reports served by a thread of its own, and
    per-call results: ``publish`` (blocking) and ``publish_async`` return the failed
    records. A fatal producer error (the idempotence sequence broken) replaces the
    producer; the records in flight on the old one are reported as failed."""

    def __init__(self, bootstrap: str, client_id: str, **overrides: object):
        self._config = producer_config(bootstrap, client_id, error_cb=self._on_error,
                                       **overrides)
        self._producer = Producer(self._config)
        self._retired: list[Producer] = []
        self._lock = threading.Lock()
        self._closed = threading.Event()
        # librdkafka reports every record within message.timeout.ms; waiting a little
        # longer means a record is never called failed here and delivered later.
        self.report_wait_s = float(self._config["message.timeout.ms"]) / 1000.0 + 5.0  # type: ignore[arg-type]
        self.replaced = 0
        self._poller = threading.Thread(target=self._serve_reports, daemon=True,
                                        name=f"{client_id}-reports")
        self._poller.start()

    # -- reports ---------------------------------------------------------------------
    def _serve_reports(self) -> None:
        while not self._closed.is_set():
            try:
                self._producer.poll(0.1)
                for old in list(self._retired):
                    old.poll(0)
                    if len(old) == 0:
                        self._retired.remove(old)
            except Exception:  # a callback bug must not stop every later report
                log.exception("delivery report handling failed")

    def _replace(self, failed: Producer, err: KafkaError) -> None:
        with self._lock:
            if self._producer is not failed:
                return
            log.error("producer failed fatally; replacing it", extra={"error": str(err)})
            self._producer = Producer(self._config)
            self.replaced += 1
        failed.purge()  # its queued records are reported failed, and retried by callers
        self._retired.append(failed)

    def _try_produce(self, batch: _Batch, i: int, record: Record) -> bool:
        """False when librdkafka's local queue is full (wait, then call again)."""
        producer = self._producer
        try:
            producer.produce(record.topic, key=record.key, value=record.value,
                             # (its stub wants list[tuple[str, str | bytes | None]])
                             headers=cast(Any, record.headers),
                             on_delivery=batch.reporter(i, record))
            return True
        except BufferError:
            return False
        except KafkaException as exc:
            err = exc.args[0]
            if err.fatal():
                self._replace(producer, err)
            batch.settle(i, failure_of(record, err))
            return True
        except (TypeError, ValueError) as exc:  # a record the client cannot even queue
            batch.settle(i, Failed(record, f"{type(exc).__name__}: {exc}", retriable=False,
                                   code=type(exc).__name__))
            return True

    def _produce_all(self, batch: _Batch, todo: list[tuple[int, Record]],
                     ) -> list[tuple[int, Record]]:
        """Hand ``todo`` (index in ``batch``, record) to the producer; returns what
        librdkafka's full local queue left, to hand over again once the report thread has
        made room. Records without headers go in one ``produce_batch`` per topic: queued
        at once, so with linger.ms 0 a fanout statement's tasks leave together, not the
        first one alone and the rest behind it (issue #15); headers need ``produce``."""
        left: list[tuple[int, Record]] = []
        by_topic: dict[str, list[tuple[int, Record]]] = {}
        for i, record in todo:
            if record.headers:
                if not self._try_produce(batch, i, record):
                    left.append((i, record))
            else:
                by_topic.setdefault(record.topic, []).append((i, record))
        for topic, items in by_topic.items():
            left += self._try_produce_batch(batch, topic, items)
        return left

    def _try_produce_batch(self, batch: _Batch, topic: str, items: list[tuple[int, Record]],
                           ) -> list[tuple[int, Record]]:
        """``items`` queued together; returns the ones the full local queue refused.
        librdkafka queues what fits and marks each refused message with its error."""
        producer = self._producer
        # dicts librdkafka's binding fills in: a refused message gets an "_error"
        messages: list[dict[str, Any]] = [
            {"key": r.key, "value": r.value, "callback": batch.reporter(i, r)}
            for i, r in items]
        try:
            producer.produce_batch(topic, messages)
        except (TypeError, ValueError):
            # Refused before anything was queued: one by one, so only the record the
            # client cannot take fails.
            return [(i, r) for i, r in items if not self._try_produce(batch, i, r)]
        except BufferError:
            # Not seen (a full queue marks each refused message instead), but if some
            # were queued before it, they go twice: a duplicate record is harmless
            # downstream, and its index reports once (_Batch.settle).
            return items
        except KafkaException as exc:
            error: KafkaError = exc.args[0]
            if error.fatal():
                self._replace(producer, error)
            for i, r in items:
                batch.settle(i, failure_of(r, error))
            return []
        left: list[tuple[int, Record]] = []
        for (i, r), message in zip(items, messages, strict=True):
            err: KafkaError | None = message.get("_error")
            if err is None:
                continue
            if err.code() == KafkaError._QUEUE_FULL:
                left.append((i, r))
            else:
                if err.fatal():
                    self._replace(producer, err)
                batch.settle(i, failure_of(r, err))
        return left

    def _on_error(self, err: KafkaError) -> None:
        # Runs on the report thread. Transient errors (broker down) are librdkafka's to
        # retry and show up as failed reports; a fatal one needs a new producer.
        if err.fatal():
            self._replace(self._producer, err)

    # -- publishing ------------------------------------------------------------------
    def publish(self, records: Sequence[Record], wait_s: float | None = None) -> list[Failed]:
        return self.send(records).wait(wait_s)

    def send(self, records: Sequence[Record]) -> Sending:
        """Hand ``records`` to the producer and return at once; ``wait()`` on the result
        gives the failures. Lets a caller do its next batch's work while the broker
        acknowledges this one (the fanout, issue #15)."""
        done = threading.Event()
        batch = _Batch(len(records), done.set)
        todo = list(enumerate(records))
        while todo := self._produce_all(batch, todo):
            time.sleep(0.01)  # the report thread is making room
        return Sending(records, batch, done, self.report_wait_s)

    async def publish_async(self, records: Sequence[Record],
                            wait_s: float | None = None) -> list[Failed]:
        loop = asyncio.get_running_loop()
        done = asyncio.Event()
        batch = _Batch(len(records), lambda: loop.call_soon_threadsafe(done.set))
        todo = list(enumerate(records))
        while todo := self._produce_all(batch, todo):
            await asyncio.sleep(0.01)
        if records:
            # at the bound, the unreported records are returned as failed
            await wait_set(done, self.report_wait_s if wait_s is None else wait_s)
        return batch.outcome(records)

    def close(self, timeout_s: float = 10.0) -> int:
        """Wait up to ``timeout_s`` for what is queued; returns the records left."""
        left = self._producer.flush(timeout_s)
        self._closed.set()
        self._poller.join(1.0)
        # Serve what the report thread may have left after its last poll (an error
        # callback, a late report) before the producer is destroyed.
        self._producer.poll(0)
        return left


async def publish_until_acked(
    publisher: Publisher, records: Sequence[Record], *,
    on_failure: Callable[[list[Failed]], None],
    give_up: Callable[[], bool] = lambda: False,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
) -> bool:
    """Publish, then republish exactly the failed records with a capped backoff until all
    are acknowledged (True) or ``give_up()`` says stop (False: the caller must not treat
    any of them as durable — its offsets stay uncommitted and the work is redone)."""
    delay, pending = 0.2, list(records)
    while pending:
        failed = await publisher.publish_async(pending)
        if not failed:
            return True
        on_failure(failed)
        if give_up():
            return False
        await sleep(delay)
        delay = min(delay * 2, 5.0)
        pending = [f.record for f in failed]
    return True


def publish_until_acked_sync(
    publisher: Publisher, records: Sequence[Record], *,
    on_failure: Callable[[list[Failed]], None],
    give_up: Callable[[], bool] = lambda: False,
    sleep: Callable[[float], object] = time.sleep,
) -> bool:
    """``publish_until_acked`` for the services that run on threads (relay lanes, the
    fanout, the delay forwarder): the same loop, blocking. ``sleep`` may be a stop
    event's ``wait``, so a stop cuts the backoff short."""
    delay, pending = 0.2, list(records)
    while pending:
        failed = publisher.publish(pending)
        if not failed:
            return True
        on_failure(failed)
        if give_up():
            return False
        sleep(delay)
        delay = min(delay * 2, 5.0)
        pending = [f.record for f in failed]
    return True
