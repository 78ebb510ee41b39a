"""The one place that knows confluent-kafka's configuration keys and error types."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, cast

import orjson
from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourceType,
)

from hookstream.core.aio import wait_set
from hookstream.core.group import DEFAULT_MEMBERSHIP, Membership
from hookstream.core.topic_check import MIN_ISR, ObservedTopic
from hookstream.core.topics import TopicSpec
from hookstream.policy.membership import MembershipWatch, group_stats

log = logging.getLogger(__name__)
# librdkafka's own log lines from the admin helpers below go through Python logging here
# instead of straight to stderr: a command line shows them only with --debug (a
# broker that cannot be reached is one clear error, not hundreds of connect lines).
client_log = logging.getLogger(f"{__name__}.client")


def _admin(bootstrap: str) -> AdminClient:
    config: dict[str, Any] = {"bootstrap.servers": bootstrap, "logger": client_log}
    return AdminClient(config)


class BrokerUnavailable(RuntimeError):
    """Kafka could not be reached or did not acknowledge in time (transient)."""


class TopicRefused(RuntimeError):
    """The cluster refused to create a topic as asked (not transient: running again
    changes nothing), e.g. a replication factor above its number of brokers."""


# Creation errors that say the request itself is wrong for this cluster.
_REFUSED_CREATE = {KafkaError.INVALID_REPLICATION_FACTOR, KafkaError.INVALID_PARTITIONS,
                   KafkaError.INVALID_CONFIG, KafkaError.POLICY_VIOLATION}


def producer_config(bootstrap: str, client_id: str, **overrides: object) -> dict[str, object]:
    config: dict[str, object] = {
        "bootstrap.servers": bootstrap,
        "client.id": client_id,
        # librdkafka's own lines through Python logging (the service's log format and
        # level), not raw on stderr.
        "logger": client_log,
        # Idempotence forces acks=all and bounded in-flight requests, so a retried
        # send never duplicates or reorders within a partition.
        "enable.idempotence": True,
        "acks": "all",
        # Latency at low load (issue #15): a record is sent at once. librdkafka wakes
        # its broker thread in whole milliseconds, so any linger (even 0.1) costs ~1 ms
        # per hop: producer → consumer p50 ~0.5 ms at linger 0 against ~1.6 ms at 1
        # (benchmarks.kafka_hop; 1.9 against 3.0 ms for bursts of 24). At high load
        # batches still fill: records queue behind the in-flight requests (up to
        # batch.num.messages), and a call's records are queued together (_produce_all).
        # At 4,000 offered deliveries/s linger 0 and 1 measured alike (BENCHMARKS.md).
        "linger.ms": 0,
        "batch.num.messages": 10_000,
        "compression.type": "lz4",
        # A batch that cannot be acknowledged within this bound is reported as failed
        # and stays unpublished/uncommitted, to be retried; nothing waits forever.
        "message.timeout.ms": 30_000,
        # librdkafka's default, pinned: CRC-32 of the key (core.event_key.partition_of).
        # Every producer of a topic must place a key alike (the fanout, the reaper and
        # the delay consumer all write the deliveries topic), so a key's partition is a
        # decision here, not whatever a client version defaults to.
        "partitioner": "consistent_random",
    }
    config.update(overrides)
    return config


def consumer_config(
    bootstrap: str, group_id: str, client_id: str, membership: Membership = DEFAULT_MEMBERSHIP,
    **overrides: object
) -> dict[str, object]:
    config: dict[str, object] = {
        "bootstrap.servers": bootstrap,
        "group.id": group_id,
        "client.id": client_id,
        "logger": client_log,
        # Offsets are committed by the service only after the outcome is durable.
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "auto.offset.reset": "earliest",
        "isolation.level": "read_committed",
        "max.poll.interval.ms": 300_000,
        # librdkafka prefetches up to 100k messages per partition by default: hundreds of
        # MB of RSS under a large backlog. We read 500 at a time; a few thousand ahead is
        # plenty and keeps the services' memory flat whatever the lag.
        "queued.min.messages": 5_000,
        "queued.max.messages.kbytes": 8_192,
        **membership_config(membership),
    }
    config.update(overrides)
    return config


def membership_config(membership: Membership) -> dict[str, object]:
    """The client keys of ``membership``. Under KIP-848 the broker assigns (server-side
    assignor, incremental) and holds the timeouts: librdkafka refuses session.timeout.ms,
    heartbeat.interval.ms and partition.assignment.strategy with that protocol."""
    if membership.broker_side:
        return {"group.protocol": "consumer"}
    return {
        "group.protocol": "classic",
        # A SIGKILLed member holds its partitions until its session times out.
        "session.timeout.ms": membership.session_timeout_ms,
        "heartbeat.interval.ms": membership.heartbeat_interval_ms,
        # Incremental: a rebalance moves only the partitions that change owner, the
        # others keep flowing (the same semantics KIP-848 has by construction).
        "partition.assignment.strategy": "cooperative-sticky",
    }


class GroupConfigRefused(RuntimeError):
    """The broker refused the group's timeouts (not transient), e.g. below its
    group.consumer.min.session.timeout.ms."""


def set_group_timeouts(bootstrap: str, groups: Sequence[str], membership: Membership,
                       timeout_s: float = 30.0) -> None:
    """Make ``membership``'s timeouts the configuration of each of ``groups`` (KIP-848
    keeps them on the broker, per group; a group that does not exist yet gets them when
    it is created). Idempotent."""
    admin = _admin(bootstrap)
    resources = [ConfigResource(ResourceType.GROUP, group, incremental_configs=[
        ConfigEntry("consumer.session.timeout.ms", str(membership.session_timeout_ms),
                    incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("consumer.heartbeat.interval.ms", str(membership.heartbeat_interval_ms),
                    incremental_operation=AlterConfigOpType.SET),
    ]) for group in groups]
    for resource, future in admin.incremental_alter_configs(resources).items():
        try:
            future.result(timeout=timeout_s)
        except KafkaException as exc:
            err = exc.args[0]
            if err.code() in _REFUSED_CREATE:
                raise GroupConfigRefused(
                    f"the broker refused group {resource.name}'s consumer.session.timeout.ms="
                    f"{membership.session_timeout_ms} / consumer.heartbeat.interval.ms="
                    f"{membership.heartbeat_interval_ms}: {err.str()} (its "
                    "group.consumer.min.session.timeout.ms / "
                    "group.consumer.min.heartbeat.interval.ms are above them: lower those "
                    "in the brokers' configuration, or set HOOKSTREAM_KAFKA_GROUP_PROTOCOL="
                    "classic)") from exc
            raise BrokerUnavailable(f"cannot configure group {resource.name}: {exc}") from exc
    # The alter is acknowledged once the controller has it; the broker that describes
    # (and applies) the group's config may see it a moment later. Return only once it
    # does, so "configured" means "in effect" for a member joining next.
    wanted = (membership.session_timeout_ms, membership.heartbeat_interval_ms)
    deadline = time.monotonic() + timeout_s
    for group in groups:
        while group_timeouts(bootstrap, group, timeout_s, admin) != wanted:
            if time.monotonic() > deadline:
                raise BrokerUnavailable(f"group {group}'s new timeouts not in effect after "
                                        f"{timeout_s:g} s")
            time.sleep(0.05)


def group_timeouts(bootstrap: str, group: str, timeout_s: float = 30.0,
                   admin: AdminClient | None = None) -> tuple[int, int]:
    """(session timeout, heartbeat interval) in ms that the broker applies to ``group``
    under KIP-848: its own configuration, else the broker's defaults. ``admin``: a
    client to reuse (a caller polling this need not connect anew each time)."""
    admin = admin or _admin(bootstrap)
    resource = ConfigResource(ResourceType.GROUP, group)
    try:
        entries = admin.describe_configs([resource])[resource].result(timeout=timeout_s)
    except KafkaException as exc:
        raise BrokerUnavailable(f"cannot describe group {group}: {exc}") from exc
    return (int(entries["consumer.session.timeout.ms"].value),
            int(entries["consumer.heartbeat.interval.ms"].value))


def check_reachable(bootstrap: str, timeout_s: float = 5.0) -> None:
    """Raise BrokerUnavailable unless a broker answers a metadata request in ``timeout_s``."""
    admin = _admin(bootstrap)
    try:
        admin.list_topics(timeout=timeout_s)
    except KafkaException as exc:
        raise BrokerUnavailable(
            f"no answer within {timeout_s:g} s ({exc.args[0].str()})") from exc


def ensure_topics(bootstrap: str, specs: Iterable[TopicSpec], timeout_s: float = 30.0) -> list[str]:
    """Create missing topics; returns the names created now. Existing topics are left alone."""
    admin = _admin(bootstrap)
    try:
        existing = set(admin.list_topics(timeout=timeout_s).topics)
    except KafkaException as exc:
        raise BrokerUnavailable(f"cannot list topics at {bootstrap}: {exc}") from exc
    wanted = [
        NewTopic(s.name, num_partitions=s.partitions, replication_factor=s.replication_factor,
                 config=s.config)
        for s in specs
        if s.name not in existing
    ]
    if not wanted:
        return []
    created: list[str] = []
    for name, future in admin.create_topics(wanted, operation_timeout=timeout_s).items():
        try:
            future.result(timeout=timeout_s)
            created.append(name)
        except KafkaException as exc:
            code = exc.args[0].code()
            if code in _REFUSED_CREATE:
                raise TopicRefused(f"cannot create topic {name}: {exc.args[0].str()}") from exc
            if code != KafkaError.TOPIC_ALREADY_EXISTS:
                raise BrokerUnavailable(f"cannot create topic {name}: {exc}") from exc
    return created


def describe_topics(bootstrap: str, names: Iterable[str],
                    timeout_s: float = 30.0) -> dict[str, ObservedTopic]:
    """Partitions, replicas and effective min.insync.replicas of those of ``names`` that
    exist (a missing name is simply absent from the answer)."""
    admin = _admin(bootstrap)
    try:
        metadata = admin.list_topics(timeout=timeout_s).topics
    except KafkaException as exc:
        raise BrokerUnavailable(f"cannot list topics at {bootstrap}: {exc}") from exc
    present = [n for n in names if n in metadata and metadata[n].error is None]
    if not present:
        return {}
    resources = [ConfigResource(ResourceType.TOPIC, n) for n in present]
    isr: dict[str, int | None] = {}
    for resource, future in admin.describe_configs(resources, request_timeout=timeout_s).items():
        try:
            entry = future.result(timeout=timeout_s).get(MIN_ISR)
        except KafkaException as exc:
            raise BrokerUnavailable(f"cannot describe topic {resource.name}: {exc}") from exc
        isr[resource.name] = None if entry is None or entry.value is None else int(entry.value)
    return {
        n: ObservedTopic(
            n, tuple(len(metadata[n].partitions[p].replicas)
                     for p in sorted(metadata[n].partitions)), isr.get(n))
        for n in present
    }


def delete_topics(bootstrap: str, names: Iterable[str], timeout_s: float = 30.0) -> None:
    admin = _admin(bootstrap)
    names = list(names)
    if not names:
        return
    for _name, future in admin.delete_topics(names, operation_timeout=timeout_s).items():
        try:
            future.result(timeout=timeout_s)
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.UNKNOWN_TOPIC_OR_PART:
                raise


def warm_group_coordinator(bootstrap: str, topic: str, timeout_s: float = 60.0) -> float:
    """Make a fresh broker's group coordinator ready before services and tests use it.

    A new cluster creates ``__consumer_offsets`` on the first group request and answers
    "coordinator load in progress" meanwhile; the first consumers of a fresh stack then
    race that start-up. One consumer that joins, commits and leaves settles it. Returns
    the seconds it took.
    """
    started = time.monotonic()
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "hookstream-warmup",
                         "enable.auto.commit": False, "auto.offset.reset": "latest",
                         "session.timeout.ms": 6_000, "logger": client_log})
    try:
        consumer.subscribe([topic])
        while time.monotonic() - started < timeout_s:
            consumer.poll(0.2)
            assigned = consumer.assignment()
            if assigned:
                try:
                    positions = consumer.position(assigned)
                    committable = [tp for tp in positions if tp.offset >= 0]
                    if committable:
                        consumer.commit(offsets=committable, asynchronous=False)
                    else:  # nothing consumed yet: still one commit round trip (_NO_OFFSET)
                        consumer.commit(asynchronous=False)
                except KafkaException as exc:
                    if exc.args[0].code() != KafkaError._NO_OFFSET:
                        continue
                return time.monotonic() - started
        raise BrokerUnavailable(f"group coordinator at {bootstrap} not ready in {timeout_s}s")
    finally:
        consumer.close()


# -- the one produce primitive -----------------------------------------------------------
# Every record's own delivery report decides whether it is durable, never an empty local
# queue: a record librdkafka gave up on after message.timeout.ms leaves the queue empty
# too. A publish call returns exactly the records that failed; the caller retries those.


class KafkaTransient(BrokerUnavailable):
    """The broker refused a record or did not acknowledge it in time; a retry may succeed."""


class KafkaPermanent(RuntimeError):
    """The broker will never accept this record as it is (too large, not authorised...)."""


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


# -- consumers ---------------------------------------------------------------------------
# A consumer's final commit and group leave at a stop, at most (see GroupConsumer.close):
# within the 30 s a supervisor gives after SIGTERM, with room for the rest of a stop.
CLOSE_WAIT_S = 5.0
# A consumer call fails with KafkaTransient (try again later, with the same consumer) or
# KafkaPermanent (this consumer instance cannot go on: close it and make a new one).
# Nothing above this boundary sees confluent-kafka's exception types.

TP = tuple[str, int]

_CONSUMER_PERMANENT = frozenset({
    KafkaError._FATAL, KafkaError.TOPIC_AUTHORIZATION_FAILED,
    KafkaError.GROUP_AUTHORIZATION_FAILED, KafkaError._INVALID_ARG,
    KafkaError._UNKNOWN_PARTITION, KafkaError._STATE,
})


def consumer_error(err: KafkaError | object, doing: str) -> KafkaTransient | KafkaPermanent:
    """confluent-kafka's error of a consumer call, as the project's own exception."""
    if not isinstance(err, KafkaError):
        return KafkaTransient(f"{doing}: {err}")
    text = f"{doing}: {err.name()}: {err.str()}"
    if err.fatal() or err.code() in _CONSUMER_PERMANENT:
        return KafkaPermanent(text)
    return KafkaTransient(text)


@contextmanager
def translated(doing: str) -> Iterator[None]:
    """``with translated("commit"): ...`` raises consumer_error() for a KafkaException."""
    try:
        yield
    except KafkaException as exc:
        raise consumer_error(exc.args[0] if exc.args else exc, doing) from exc


def without_errors(messages: Sequence[Message], doing: str = "consume"
                   ) -> tuple[list[Message], KafkaTransient | KafkaPermanent | None]:
    """The records of a consume call, and its first error event translated (None when
    there was none; end-of-partition events are not errors)."""
    good: list[Message] = []
    error: KafkaTransient | KafkaPermanent | None = None
    for msg in messages:
        err = msg.error()
        if err is None:
            good.append(msg)
        elif error is None and err.code() != KafkaError._PARTITION_EOF:
            error = consumer_error(err, doing)
    return good, error


Rebalanced = Callable[[list[TP]], None]
STATS_INTERVAL_MS = 5_000


def consume_available(consumer: Consumer, max_records: int, timeout_s: float,
                      gather_s: float = 0.0) -> list[Message]:
    """What is there now, up to ``max_records``; if nothing is, the first record to come
    within ``timeout_s`` and whatever arrived with it. Never waits for a batch to fill:
    confluent-kafka's ``consume(n, timeout)`` returns only once it has ``n`` messages or
    the timeout passed, so at low load every batch waited out the whole timeout (the
    fanout's 0.5 s was most of the pipeline's latency floor, issue #15). At high load
    the queue holds more than ``max_records`` and batches are full as before.

    ``gather_s``: once a batch has started, wait at most this long for company — for a
    consumer whose every batch costs database round trips, a few milliseconds of latency
    buy batches several times larger at moderate load (the CPU the dispatcher needs)."""
    messages = consumer.consume(max_records, 0)
    if not messages and timeout_s > 0:
        messages = consumer.consume(1, timeout_s)
        if messages and max_records > 1:
            messages += consumer.consume(max_records - 1, 0)
    if messages and gather_s > 0 and len(messages) < max_records:
        deadline = time.monotonic() + gather_s
        while len(messages) < max_records and (left := deadline - time.monotonic()) > 0:
            messages += consumer.consume(max_records - len(messages), left)
    return messages


def watching(config: dict[str, object], watch: MembershipWatch) -> dict[str, object]:
    """``config`` with librdkafka's statistics fed to ``watch`` (served from consume, on
    the consuming thread): how a consumer stuck outside its group is noticed."""
    def on_stats(raw: str) -> None:
        try:
            watch.observe(group_stats(orjson.loads(raw)), time.monotonic())
        except orjson.JSONDecodeError:  # never seen; a report lost is not worth a crash
            log.warning("unreadable librdkafka statistics")

    return {**config, "statistics.interval.ms": STATS_INTERVAL_MS, "stats_cb": on_stats}


def stuck_error(watch: MembershipWatch) -> KafkaPermanent:
    return KafkaPermanent(
        f"not a member of its consumer group for {watch.outside_for(time.monotonic()):.0f}s"
        " although the group coordinator answers: recreating the consumer")


class GroupConsumer:
    """One consumer-group member, for a service that consumes, processes and then commits
    from a single thread, with confluent-kafka's errors translated (see above).

    It remembers, per partition, the first record consumed and not yet committed, so a
    failed batch is read again by ``rewind()`` (a local seek: no broker round trip, so it
    works during an outage). A consumer that failed for good, or could not seek, is
    replaced by ``rebuild()`` (closed, made anew, subscribed again: it resumes from the
    committed offsets).

    A member left outside its group while the coordinator answers (``MembershipWatch``)
    makes ``consume`` raise KafkaPermanent, so the caller's ``recover`` rebuilds it.

    ``reachable`` is False from librdkafka's "all brokers down", or from the second failed
    metadata probe in a row (an idle consumer probes every ``probe_interval_s``: the error
    callback alone was seen to stay silent through a 50 s outage), until the broker
    answers again (a record consumed, a commit, or a probe), so an idle service reports
    an outage too.
    """

    def __init__(self, config: dict[str, object], topics: Sequence[str], *,
                 on_assign: Rebalanced | None = None, on_revoke: Rebalanced | None = None,
                 on_lost: Rebalanced | None = None, probe_interval_s: float = 2.0,
                 watch: MembershipWatch | None = None):
        self.watch = watch or MembershipWatch()
        self._config = watching({**config, "error_cb": self._on_error,
                                 "on_commit": self._on_commit}, self.watch)
        self._topics = list(topics)
        self._callbacks = (on_assign, on_revoke, on_lost)
        self.probe_interval_s = probe_interval_s
        self.reachable = True
        self.last_error: str | None = None
        self.rebuilt = 0
        self.commit_failures = 0
        # The latest offsets committed without waiting, per partition still owned.
        self._async_offsets: dict[TP, int] = {}
        self._fatal: KafkaError | None = None
        self._last_probe = 0.0
        self._probe_failures = 0
        # partition → [first consumed offset not committed, highest consumed offset]
        self._uncommitted: dict[TP, list[int]] = {}
        self._consumer = self._subscribed()

    def _subscribed(self) -> Consumer:
        consumer = Consumer(self._config)
        on_assign, on_revoke, on_lost = self._callbacks

        def assigned(_c: Any, partitions: list[Any]) -> None:
            if on_assign is not None:
                on_assign([(tp.topic, tp.partition) for tp in partitions])

        def revoked(_c: Any, partitions: list[Any]) -> None:
            tps = [(tp.topic, tp.partition) for tp in partitions]
            for tp in tps:
                self._uncommitted.pop(tp, None)
                self._async_offsets.pop(tp, None)
            if on_revoke is not None:
                on_revoke(tps)

        def lost(_c: Any, partitions: list[Any]) -> None:
            tps = [(tp.topic, tp.partition) for tp in partitions]
            for tp in tps:
                self._uncommitted.pop(tp, None)
                self._async_offsets.pop(tp, None)
            if on_lost is not None:
                on_lost(tps)

        with translated("subscribe"):
            consumer.subscribe(self._topics, on_assign=assigned, on_revoke=revoked,
                               on_lost=lost)
        return consumer

    def _on_error(self, err: KafkaError) -> None:
        # Served from consume(), on the consuming thread.
        if err.fatal():
            self._fatal = err
        if err.code() == KafkaError._ALL_BROKERS_DOWN or err.fatal():
            self.reachable = False
            self.last_error = f"kafka: {err.name()}: {err.str()}"

    def _answered(self) -> None:
        self.reachable, self.last_error = True, None
        self._probe_failures = 0

    def _on_commit(self, err: KafkaError | None, partitions: list[TopicPartition]) -> None:
        # Served from consume(). An asynchronous commit that failed leaves the records
        # processed but not marked: they are read again after a restart or a rebalance
        # (at least once; every consumer here is idempotent), never skipped.
        failed = [tp for tp in partitions if tp.error is not None]
        if err is not None or failed:
            self.commit_failures += 1
            log.warning("offset commit failed; those records may be read again", extra={
                "error": str(err or failed[0].error),
                "partitions": [tp.partition for tp in failed] or None})

    # -- consuming ---------------------------------------------------------------------
    def consume(self, max_records: int, timeout_s: float,
                gather_s: float = 0.0) -> list[Message]:
        """The records consumed (never error events). Raises KafkaPermanent after a fatal
        error, KafkaTransient for any other error event; the records consumed with it are
        remembered as uncommitted, so a ``rewind()`` reads them again."""
        if self._fatal is not None:
            raise consumer_error(self._fatal, "consume")
        with translated("consume"):
            messages = consume_available(self._consumer, max_records, timeout_s, gather_s)
        good, error = without_errors(messages)
        for msg in good:
            # A consumed record (no error) always has its topic, partition and offset.
            tp = cast(TP, (msg.topic(), msg.partition()))
            offset = cast(int, msg.offset())
            span = self._uncommitted.get(tp)
            if span is None:
                self._uncommitted[tp] = [offset, offset]
            else:
                span[1] = max(span[1], offset)
        if good:
            self._answered()
        if self._fatal is not None:
            raise consumer_error(self._fatal, "consume")
        if self.watch.stuck:  # before its error events: they may never stop coming
            raise stuck_error(self.watch)  # recover() rebuilds it
        if error is not None:
            raise error
        if not good:
            self._probe()
        return good

    def _probe(self) -> None:
        now = time.monotonic()
        if now - self._last_probe < self.probe_interval_s:
            return
        self._last_probe = now
        missing: list[KafkaError] = []
        try:
            # One request for all topics: librdkafka spaces metadata requests ~0.5 s
            # apart, so one request per subscribed topic blocked this consumer's loop
            # for seconds (the delay forwarder reads seven tiers: retries came late).
            known = self._consumer.list_topics(timeout=2.0).topics
            for topic in self._topics:
                found = known.get(topic)
                if found is None:
                    missing.append(KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART,
                                              f"Subscribed topic not available: {topic}"))
                elif found.error is not None:
                    missing.append(found.error)
        except KafkaException as exc:
            self._probe_failures += 1
            if self._probe_failures >= 2:  # one slow answer on a busy host is not an outage
                self.reachable = False
                self.last_error = f"kafka: metadata probe failed: {exc}"
            return
        self._answered()
        if missing:
            # The classic protocol reports a subscribed topic that does not exist as an
            # error event; KIP-848 says nothing and the member idles. Either way the
            # caller hears it (a service reports it instead of a quiet green idle).
            raise consumer_error(missing[0], "consume")

    def commit(self, offsets: dict[TP, int], *, asynchronous: bool = False) -> None:
        """Commit the next offset to read of each partition; call it only once what
        those records caused is durable. ``asynchronous``: do not wait for the
        coordinator's answer (a round trip per batch on the latency path, issue #15):
        a commit that then fails is reported by ``_on_commit`` and costs a re-read
        after a restart, never a loss."""
        if not offsets:
            return
        tps = [TopicPartition(t, p, o) for (t, p), o in offsets.items()]
        with translated("commit"):
            if asynchronous:
                self._consumer.commit(offsets=tps, asynchronous=True)
                result = []
            else:
                result = self._consumer.commit(offsets=tps, asynchronous=False)
        for tp in result or []:
            if tp.error is not None:
                raise consumer_error(tp.error, "commit")
        if asynchronous:
            self._async_offsets.update(offsets)
        else:
            self._answered()
            for tp_key in offsets:
                self._async_offsets.pop(tp_key, None)
        for tp_key, offset in offsets.items():
            span = self._uncommitted.get(tp_key)
            if span is None:
                continue
            if span[1] >= offset:
                span[0] = max(span[0], offset)
            else:
                del self._uncommitted[tp_key]

    def pause(self, partitions: Iterable[TP]) -> None:
        with translated("pause"):
            self._consumer.pause([TopicPartition(t, p) for t, p in partitions])

    def resume(self, partitions: Iterable[TP]) -> None:
        with translated("resume"):
            self._consumer.resume([TopicPartition(t, p) for t, p in partitions])

    def assignment(self) -> list[TP]:
        with translated("assignment"):
            return [(tp.topic, tp.partition) for tp in self._consumer.assignment()]

    # -- recovering --------------------------------------------------------------------
    def rewind(self) -> None:
        """Seek each partition back to its first record consumed and not committed."""
        for (t, p), (first, _) in list(self._uncommitted.items()):
            with translated("seek"):
                self._consumer.seek(TopicPartition(t, p, first))
            del self._uncommitted[(t, p)]

    def rebuild(self) -> None:
        """Close this consumer (its partitions are revoked) and subscribe a new one, which
        resumes from the committed offsets. Errors of the old one are only logged."""
        self._close_quietly()
        self._uncommitted.clear()
        self._async_offsets.clear()
        self._fatal = None
        self.watch.reset()
        self._consumer = self._subscribed()
        self.rebuilt += 1

    def recover(self, failure: BaseException) -> None:
        """After a failed batch: rewind, or rebuild when the consumer failed for good or
        cannot seek."""
        if not isinstance(failure, KafkaPermanent):
            try:
                self.rewind()
                return
            except (KafkaTransient, KafkaPermanent) as exc:
                log.warning("rewind failed; rebuilding the consumer", extra={"error": str(exc)})
        else:
            log.warning("consumer failed; rebuilding it", extra={"error": str(failure)})
        self.rebuild()

    def _close_quietly(self) -> None:
        try:
            self._consumer.close()
        except (KafkaException, RuntimeError) as exc:  # already closed, or fatal
            log.warning("consumer close failed", extra={"error": str(exc)})

    def close(self, wait_s: float = CLOSE_WAIT_S) -> bool:
        """Leave the group. The last asynchronous commits are made again, waiting this
        time, so a clean stop leaves nothing to read twice — for at most ``wait_s``:
        librdkafka's synchronous commit waits as long as the coordinator does not answer
        (a frozen broker: minutes measured), which kept a SIGTERMed service alive until
        it was killed. Past the bound (False) the close is left to a daemon thread and
        the caller goes on; what was not committed is read again by the next owner."""
        def final() -> None:
            if self._async_offsets:
                try:
                    self.commit(dict(self._async_offsets))
                except (KafkaTransient, KafkaPermanent) as exc:
                    log.warning("final commit failed; those records may be read again",
                                extra={"error": str(exc)})
            self._close_quietly()

        closing = threading.Thread(target=final, name="consumer-close", daemon=True)
        closing.start()
        closing.join(wait_s)
        if closing.is_alive():
            log.error("the consumer did not close within its bound (the broker does not "
                      "answer); records not committed will be read again by the next owner",
                      extra={"wait_s": wait_s})
            return False
        return True
