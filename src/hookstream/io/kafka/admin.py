"""Topics and consumer groups, administered: created, described, deleted, configured;
the broker's reachability and a fresh cluster's group coordinator made ready."""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourceType,
)

from hookstream.core.group import Membership
from hookstream.core.topic_check import MIN_ISR, ObservedTopic
from hookstream.core.topics import TopicSpec
from hookstream.io.kafka.config import client_log
from hookstream.io.kafka.errors import BrokerUnavailable, GroupConfigRefused, TopicRefused


def _admin(bootstrap: str) -> AdminClient:
    config: dict[str, Any] = {"bootstrap.servers": bootstrap, "logger": client_log}
    return AdminClient(config)


# Creation errors that say the request itself is wrong for this cluster.
_REFUSED_CREATE = {KafkaError.INVALID_REPLICATION_FACTOR, KafkaError.INVALID_PARTITIONS,
                   KafkaError.INVALID_CONFIG, KafkaError.POLICY_VIOLATION}


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

