"""The one place that knows confluent-kafka's configuration keys and error types."""

from __future__ import annotations

import logging
from collections.abc import Iterable

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
        "session.timeout.ms": 10_000,
        "heartbeat.interval.ms": 2_000,
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
