"""The one place that knows confluent-kafka's configuration keys and error types."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from hookstream.topics import TopicSpec

log = logging.getLogger(__name__)


class BrokerUnavailable(RuntimeError):
    """Kafka could not be reached or did not acknowledge in time (transient)."""


def producer_config(bootstrap: str, client_id: str, **overrides: object) -> dict[str, object]:
    config: dict[str, object] = {
        "bootstrap.servers": bootstrap,
        "client.id": client_id,
        # Idempotence forces acks=all and bounded in-flight requests, so a retried
        # send never duplicates or reorders within a partition.
        "enable.idempotence": True,
        "acks": "all",
        "linger.ms": 5,
        "batch.num.messages": 10_000,
        "compression.type": "lz4",
        # A batch that cannot be acknowledged within this bound is reported as failed
        # and stays unpublished/uncommitted, to be retried; nothing waits forever.
        "message.timeout.ms": 30_000,
    }
    config.update(overrides)
    return config


def consumer_config(
    bootstrap: str, group_id: str, client_id: str, **overrides: object
) -> dict[str, object]:
    config: dict[str, object] = {
        "bootstrap.servers": bootstrap,
        "group.id": group_id,
        "client.id": client_id,
        # Offsets are committed by the service only after the outcome is durable.
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "auto.offset.reset": "earliest",
        "isolation.level": "read_committed",
        # A SIGKILLed member holds its partitions until its session times out (the chaos
        # run saw a 10 s stall): the broker's minimum, 6 s, keeps that gap short.
        "session.timeout.ms": 6_000,
        "heartbeat.interval.ms": 1_500,
        "max.poll.interval.ms": 300_000,
        "partition.assignment.strategy": "cooperative-sticky",
        # librdkafka prefetches up to 100k messages per partition by default: hundreds of
        # MB of RSS under a large backlog. We read 500 at a time; a few thousand ahead is
        # plenty and keeps the services' memory flat whatever the lag.
        "queued.min.messages": 5_000,
        "queued.max.messages.kbytes": 8_192,
    }
    config.update(overrides)
    return config


def new_producer(bootstrap: str, client_id: str, **overrides: object) -> Producer:
    return Producer(producer_config(bootstrap, client_id, **overrides))


def ensure_topics(bootstrap: str, specs: Iterable[TopicSpec], timeout_s: float = 30.0) -> list[str]:
    """Create missing topics; returns the names created now. Existing topics are left alone."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    try:
        existing = set(admin.list_topics(timeout=timeout_s).topics)
    except KafkaException as exc:
        raise BrokerUnavailable(f"cannot list topics at {bootstrap}: {exc}") from exc
    wanted = [
        NewTopic(s.name, num_partitions=s.partitions, replication_factor=1, config=s.config)
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
            if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise BrokerUnavailable(f"cannot create topic {name}: {exc}") from exc
    return created


def delete_topics(bootstrap: str, names: Iterable[str], timeout_s: float = 30.0) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    names = list(names)
    if not names:
        return
    for _name, future in admin.delete_topics(names, operation_timeout=timeout_s).items():
        try:
            future.result(timeout=timeout_s)
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.UNKNOWN_TOPIC_OR_PART:
                raise


def flush_or_raise(producer: Producer, timeout_s: float) -> None:
    remaining = producer.flush(timeout_s)
    if remaining:
        raise BrokerUnavailable(f"{remaining} records not acknowledged within {timeout_s}s")


def warm_group_coordinator(bootstrap: str, topic: str, timeout_s: float = 60.0) -> float:
    """Make a fresh broker's group coordinator ready before services and tests use it.

    A new cluster creates ``__consumer_offsets`` on the first group request and answers
    "coordinator load in progress" meanwhile; the first consumers of a fresh stack then
    race that start-up. One consumer that joins, commits and leaves settles it. Returns
    the seconds it took.
    """
    from confluent_kafka import Consumer

    started = time.monotonic()
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "hookstream-warmup",
                         "enable.auto.commit": False, "auto.offset.reset": "latest",
                         "session.timeout.ms": 6_000})
    try:
        consumer.subscribe([topic])
        while time.monotonic() - started < timeout_s:
            consumer.poll(0.2)
            assigned = consumer.assignment()
            if assigned:
                try:
                    positions = consumer.position(assigned)
                    consumer.commit(offsets=[tp for tp in positions if tp.offset >= 0] or None,
                                    asynchronous=False)
                except KafkaException as exc:
                    if exc.args[0].code() != KafkaError._NO_OFFSET:
                        continue
                return time.monotonic() - started
        raise BrokerUnavailable(f"group coordinator at {bootstrap} not ready in {timeout_s}s")
    finally:
        consumer.close()


def produce(producer: Producer, topic: str, key: bytes, value: bytes, *,
            headers: Any = None, on_delivery: Any = None) -> None:
    """``producer.produce`` that waits for room when librdkafka's local queue is full
    (serving delivery reports meanwhile) instead of raising ``BufferError``."""
    while True:
        try:
            producer.produce(topic, key=key, value=value, headers=headers,
                             on_delivery=on_delivery)
            return
        except BufferError:
            producer.poll(0.05)
